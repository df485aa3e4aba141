package mcpbind

// BenchPolicy is benchPolicy, for the external test that checks it.
const BenchPolicy = benchPolicy

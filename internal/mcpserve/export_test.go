package mcpserve

// CallKey is callKey, for the tests that look up the held calls' index.
var CallKey = callKey

package mcpbind_test

import (
	"testing"

	"github.com/mewkit/fulfiller/agent/mcpfront/mcpbind"
	"github.com/mewkit/fulfiller/internal/loadtest"
)

// The engine's benchmark with a policy decides with the MCP bench's own
// policy, so that its figures are the bench's engine part.
func TestBenchPolicyIsTheBenchs(t *testing.T) {
	if mcpbind.BenchPolicy != loadtest.MCPDefaultPolicy {
		t.Fatalf("BenchmarkEngineMCPCallOPA's policy is not internal/loadtest.MCPDefaultPolicy:\n%s\nwant\n%s", mcpbind.BenchPolicy, loadtest.MCPDefaultPolicy)
	}
}

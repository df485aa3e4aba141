package main

import (
	"strings"
	"testing"
)

// TestDemoHelpSaysWhatRuns: `demo --help` names the three tool servers
// the demo starts (it said two) and does not promise that only the
// production delete waits for the person (every card to oncall-alice
// does) (issue 42).
func TestDemoHelpSaysWhatRuns(t *testing.T) {
	stdout, stderr, code := cli(t, "", "demo", "--help")
	if code != 0 {
		t.Fatalf("demo --help: exit %d, %s", code, stderr)
	}
	help := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"three sample tool servers (calculator, a small file system fs, and jobs, which runs its long jobs as MCP tasks)",
		"oncall-lead, asked about payments when nobody on call answers",
		"every request to oncall-alice waits for your answer",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("demo --help lacks %q:\n%s", want, stdout)
		}
	}
	for _, wrong := range []string{"two sample tool servers", "the production delete waits"} {
		if strings.Contains(help, wrong) {
			t.Errorf("demo --help still says %q", wrong)
		}
	}
}

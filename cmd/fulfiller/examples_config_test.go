package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runRoot runs the CLI with args from the repository root, as an operator
// following the docs would.
func runRoot(t *testing.T, args ...string) error {
	t.Helper()
	t.Chdir("../..")
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(new(strings.Builder))
	root.SetErr(new(strings.Builder))
	return root.Execute()
}

// TestConfigBadKeyExits2 adds a misspelt key to the example: the run must
// stop with exit code 2 and a message naming the key.
func TestConfigBadKeyExits2(t *testing.T) {
	raw, err := os.ReadFile("../../examples/fulfiller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, append(raw, "decision_log: /tmp/x\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	err = runRoot(t, "run", "--config", bad, "--check")
	if code := exitCode(err); code != 2 {
		t.Fatalf("exit %d (%v), want 2", code, err)
	}
	if want := `unknown key "decision_log"`; !strings.Contains(err.Error(), want) {
		t.Fatalf("message %q does not name the key (%s)", err, want)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunHelpExamples: every `fulfiller run` line of run --help's
// examples works as written from the repository's root: with --check it
// is valid (exit 0) and draws no warning. The files they name are the
// repository's (examples/ is linked into a temporary directory) or made
// here (the token file, mode 0600); FULFILLER_TOKEN is what the first
// example exports. The example config's --http 127.0.0.1:9464 is moved to
// a free port through FULFILLER_HTTP, which the config's value yields to,
// so the test does not depend on that port being free.
func TestRunHelpExamples(t *testing.T) {
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fulfiller.token"), []byte("test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	help := newRunCmd().Example
	if !strings.Contains(help, `export FULFILLER_TOKEN=`) {
		t.Fatalf("the examples no longer export FULFILLER_TOKEN:\n%s", help)
	}
	ran := 0
	for line := range strings.Lines(help) {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "fulfiller" || fields[1] != "run" {
			continue
		}
		ran++
		args := fields[1:]
		if !strings.Contains(line, " --check") {
			args = append(args, "--check")
		}
		env := map[string]string{"FULFILLER_HTTP": "127.0.0.1:0"}
		if !strings.Contains(line, "--token-file") {
			env["FULFILLER_TOKEN"] = "test-token"
		}
		_, stderr, code := cliEnv(t, "", env, args...)
		if code != 0 || !strings.Contains(stderr, "configuration is valid") || strings.Contains(stderr, "WARN") {
			t.Errorf("%s: exit %d, want 0 without warnings:\n%s", strings.TrimSpace(line), code, stderr)
		}
		if _, err := os.Stat("fulfiller.state"); err == nil {
			t.Errorf("%s: --check created fulfiller.state", strings.TrimSpace(line))
		}
	}
	if ran != 3 {
		t.Errorf("ran %d example lines, want the 3 of run --help", ran)
	}
}

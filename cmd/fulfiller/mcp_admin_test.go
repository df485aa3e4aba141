package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/poll"
)

// mcpInit runs `fulfiller mcp init` with the user's config directory in
// a directory of the test's, and returns it.
func mcpInit(t *testing.T, args ...string) (dir, stdout, stderr string, code int) {
	t.Helper()
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	stdout, stderr, code = cli(t, "", append([]string{"mcp", "init"}, args...)...)
	return filepath.Join(xdg, "fulfiller"), stdout, stderr, code
}

// What init writes is where fulfiller mcp reads by default (DESIGN:
// --policy $XDG_CONFIG_HOME/fulfiller/policies, --data …/data.yaml), and
// it is a policy that passes `fulfiller check` and `fulfiller test` as
// written, with the user's working trees in its data: a write inside
// them runs, one outside asks the caller.
func TestMCPInitWritesAStarterPolicyThatPasses(t *testing.T) {
	root := t.TempDir()
	other := t.TempDir()
	dir, stdout, stderr, code := mcpInit(t, "--root", root, "--root", other+"/./")
	if code != 0 || stderr != "" {
		t.Fatalf("mcp init: exit %d, stderr %q", code, stderr)
	}
	policyDir, data := filepath.Join(dir, "policies"), filepath.Join(dir, "data.yaml")
	for _, want := range []string{
		"wrote " + filepath.Join(policyDir, "main.rego") + "\n",
		"wrote " + filepath.Join(policyDir, "workspace.rego") + "\n",
		"wrote " + filepath.Join(policyDir, "paths.rego") + "\n",
		"wrote " + data + "\n",
		"fulfiller test " + policyDir + " " + data + "\n",
		"claude mcp add fs -- fulfiller mcp --name fs -- npx -y @modelcontextprotocol/server-filesystem " + root + " " + other + "\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("mcp init's output lacks %q:\n%s", want, stdout)
		}
	}
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`workspace_roots: ["`+root+`","`+other+`"]`)) {
		t.Errorf("data.yaml does not name the roots %s, %s (absolute, cleaned):\n%s", root, other, raw)
	}

	if _, stderr, code := cli(t, "", "check", "--strict", policyDir); code != 0 {
		t.Fatalf("fulfiller check on the written policy: exit %d, %s", code, stderr)
	}
	stdout, stderr, code = cli(t, "", "test", policyDir, data)
	if code != 0 || !regexp.MustCompile(`(?m)^\d+ passed, 0 failed$`).MatchString(stdout) || stderr != "" {
		t.Fatalf("fulfiller test on the written files: exit %d, stdout %s, stderr %q", code, stdout, stderr)
	}

	decide := func(path string) map[string]any {
		t.Helper()
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":` + quoteJSON(path) + `,"content":"x"}}}`
		// The decision, not its speed (a loaded machine under -race):
		// a generous --policy-timeout.
		stdout, stderr, code := cli(t, call, "eval", "--policy", policyDir, "--data", data, "--input", "-", "--policy-timeout", "1m")
		if code != 0 {
			t.Fatalf("eval %s: exit %d, %s", path, code, stderr)
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(stdout), &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := decide(filepath.Join(other, "main.go")); d["action"] != "fulfill" {
		t.Errorf("a write inside a root: %v, want fulfill", d)
	}
	d := decide(filepath.Join(root, "..", "escape.go"))
	if d["action"] != "escalate" || len(d["approvers"].([]any)) != 1 || d["approvers"].([]any)[0] != "@caller" {
		t.Errorf("a write outside the roots (by ..): %v, want escalate to @caller", d)
	}
	if d := decide(filepath.Join(root, ".env")); d["action"] != "reject" || !strings.Contains(d["message"].(string), "is a secret") {
		t.Errorf("a write to .env: %v, want a reject naming the secret", d)
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Without --root the working tree is the working directory.
func TestMCPInitDefaultsToTheWorkingDirectory(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	dir, _, stderr, code := mcpInit(t)
	if code != 0 {
		t.Fatalf("mcp init: exit %d, %s", code, stderr)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(wd)
	if !bytes.Contains(raw, []byte(`workspace_roots: [`+quoteJSON(wd))) || !bytes.Contains(raw, []byte(quoteJSON(real))) {
		t.Errorf("data.yaml's roots are not the working directory %s:\n%s", wd, raw)
	}
}

// init never overwrites the user's policy unasked: a second run is a
// one-line usage error naming the file and writes nothing; --force
// writes the starter files again and leaves the user's own files alone.
func TestMCPInitOverwritesOnlyWithForce(t *testing.T) {
	root := t.TempDir()
	dir, _, stderr, code := mcpInit(t, "--root", root)
	if code != 0 {
		t.Fatalf("mcp init: exit %d, %s", code, stderr)
	}
	main := filepath.Join(dir, "policies", "main.rego")
	mine := filepath.Join(dir, "policies", "mine.rego")
	edited := []byte("package fulfiller\n\n# edited\n")
	for _, p := range []string{main, mine} {
		if err := os.WriteFile(p, edited, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := cli(t, "", "mcp", "init", "--root", root)
	if want := "fulfiller: " + main + " exists: fulfiller mcp init overwrites nothing without --force\n"; code != 2 || stderr != want || stdout != "" {
		t.Fatalf("init again: exit %d, stdout %q, stderr %q; want exit 2, %q", code, stdout, stderr, want)
	}
	if b, _ := os.ReadFile(main); !bytes.Equal(b, edited) {
		t.Fatal("init without --force changed the user's main.rego")
	}
	if _, stderr, code := cli(t, "", "mcp", "init", "--root", root, "--force"); code != 0 {
		t.Fatalf("init --force: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(main); bytes.Equal(b, edited) {
		t.Error("init --force left the edited main.rego")
	}
	if b, _ := os.ReadFile(mine); !bytes.Equal(b, edited) {
		t.Error("init --force touched a file of the user's own")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "policies"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("init left %s behind", e.Name())
		}
	}
}

func TestMCPInitRefusesARootThatIsNoDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		file:                  "fulfiller: --root " + file + ": not a directory\n",
		file + "-nonexistent": "fulfiller: --root " + file + "-nonexistent: no such file or directory\n",
	} {
		_, stdout, stderr, code := mcpInit(t, "--root", arg)
		if code != 2 || stderr != want || stdout != "" {
			t.Errorf("--root %s: exit %d, stdout %q, stderr %q; want exit 2, %q", arg, code, stdout, stderr, want)
		}
	}
}

// The starter policy's path checks are the examples' (paths.rego, with
// its tests for .., // and encoded dots): one file, copied, kept equal.
func TestMCPStarterPathsAreTheExamples(t *testing.T) {
	a, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", "paths.rego"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "mcp", "policies", "paths.rego"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("examples/mcp/policies/paths.rego differs from examples/policies/paths.rego: copy the fix across")
	}
}

// accept-tools runs while a fulfiller mcp holds the state directory: it
// accepts what the front end last listed, prints each changed tool with
// its old and new digests, and the front end's next call sees the
// accepted definition. An upstream with no pins is a one-line usage
// error that says which upstreams have some.
func TestMCPAcceptToolsAcceptsWhatTheFrontEndListed(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	front, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.SharedDir, Dir: dir}, Space: mcpserve.StoreSpace, Member: "mcp-front"})
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	if _, err := front.Pin(ctx, "fs", map[string]string{"read_text_file": "sha256:r1", "write_file": "sha256:w1"}); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := cli(t, "", "mcp", "accept-tools", "fs", "--state", dir)
	if want := "fs: no tool definition changed since it was pinned (2 tools pinned); nothing to accept\n"; code != 0 || stdout != want {
		t.Fatalf("accept-tools with nothing changed: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}

	// The upstream changes write_file's description: the front end lists it.
	if got, err := front.Pin(ctx, "fs", map[string]string{"read_text_file": "sha256:r1", "write_file": "sha256:w2"}); err != nil || got["write_file"] != "sha256:w1" {
		t.Fatalf("Pin of the changed definition = %v, %v", got, err)
	}
	stdout, stderr, code = cli(t, "", "mcp", "accept-tools", "fs", "--state", dir, "--dry-run")
	if code != 0 || !strings.HasPrefix(stdout, "fs: would accept (--dry-run) 1 changed tool definitions\n") {
		t.Fatalf("--dry-run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = cli(t, "", "mcp", "accept-tools", "fs", "--state", dir)
	want := "fs: accepted 1 changed tool definitions\n" +
		"TOOL        PINNED     NOW\n" +
		"write_file  sha256:w1  sha256:w2\n"
	if code != 0 || stdout != want {
		t.Fatalf("accept-tools: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	poll.Until(t, "the front end sees the accepted definition", func() bool {
		got, err := front.Pin(ctx, "fs", map[string]string{"write_file": "sha256:w2"})
		return err == nil && got["write_file"] == "sha256:w2"
	})

	stdout, stderr, code = cli(t, "", "mcp", "accept-tools", "github", "--state", dir)
	if want := "fulfiller: no upstream named github has tools pinned here (upstreams with pins: fs)\n"; code != 2 || stderr != want || stdout != "" {
		t.Errorf("unknown NAME: exit %d, stdout %q, stderr %q; want exit 2, %q", code, stdout, stderr, want)
	}
}

func TestMCPAcceptToolsUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "accept-tools"}, "fulfiller: name the one upstream whose tools to accept (its --name, or its NAME in --upstream)\n"},
		{[]string{"mcp", "accept-tools", "fs", "--state", "memory"}, "fulfiller: --state memory keeps no pins: name the --state fulfiller mcp uses\n"},
		{[]string{"mcp", "accept-tools", "fs", "--state", missing}, "fulfiller: --state " + missing + ": no such directory: no fulfiller mcp has pinned tools there\n"},
	} {
		stdout, stderr, code := cli(t, "", tc.args...)
		if code != 2 || stderr != tc.want || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

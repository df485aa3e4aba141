package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var exampleToolMetadata = filepath.Join("..", "..", "examples", "tool-metadata.yaml")

// badToolMetadata writes a tool-metadata file with a hint that is not a
// boolean on line 3, and returns its path and the one line every command
// must print for it.
func badToolMetadata(t *testing.T) (path, want string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "tool-metadata.yaml")
	if err := os.WriteFile(path, []byte("fs:\n  read_file: {annotations: {readOnlyHint: true}}\n  write_file: {annotations: {destructiveHint: yes}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, "fulfiller: --tool-metadata " + path + `:3: fs: write_file: annotations: destructiveHint: want true or false, got the string "yes"` + "\n"
}

// TestCheckToolMetadata: fulfiller check validates the file named by
// --tool-metadata (or FULFILLER_TOOL_METADATA, like every flag): the
// shipped example passes silently; a bad file is exit 2 with one line
// naming file, line and key.
func TestCheckToolMetadata(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--tool-metadata", exampleToolMetadata},
		{"check", "--tool-metadata", exampleToolMetadata, "--strict", examplePolicies},
	} {
		if stdout, stderr, code := cli(t, "", args...); code != 0 || stdout != "" || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a silent 0", args, code, stdout, stderr)
		}
	}
	bad, want := badToolMetadata(t)
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"check", "--tool-metadata", bad}, want},
		{nil, []string{"check", "--tool-metadata", bad, examplePolicies}, want},
		{map[string]string{"FULFILLER_TOOL_METADATA": bad}, []string{"check", examplePolicies}, want},
		{map[string]string{"FULFILLER_TOOL_METADATA": bad}, []string{"check"}, want},
		{nil, []string{"check", "--tool-metadata", missing}, "fulfiller: --tool-metadata " + missing + ": no such file or directory\n"},
	} {
		if stdout, stderr, code := cliEnv(t, "", tc.env, tc.args...); code != 2 || stdout != "" || stderr != tc.want {
			t.Errorf("%q (env %v): exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, tc.env, code, stdout, stderr, tc.want)
		}
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("# nothing yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := cli(t, "", "check", "--tool-metadata", empty); code != 0 || stderr != "fulfiller: warning: --tool-metadata "+empty+" declares no tools\n" {
		t.Errorf("empty file: exit %d, stderr %q", code, stderr)
	}
}

// TestRunChecksToolMetadata: run --check loads --tool-metadata as run
// does — a bad file stops both with exit 2 and the same line, before any
// join — and reports how many entries a good one declares.
func TestRunChecksToolMetadata(t *testing.T) {
	bad, want := badToolMetadata(t)
	for _, args := range [][]string{
		{"run", "--gateway", "ws://127.0.0.1:1", "--check", "--tool-metadata", bad},
		{"run", "--gateway", "ws://127.0.0.1:1", "--tool-metadata", bad},
	} {
		_, stderr, code := cli(t, "", args...)
		if got := errorLines(stderr); code != 2 || got != want {
			t.Errorf("%q: exit %d, error %q; want 2 and %q", args, code, got, want)
		}
	}
	_, stderr, code := cli(t, "", "run", "--gateway", "ws://127.0.0.1:1", "--check", "--tool-metadata", exampleToolMetadata, "--policy", examplePolicies)
	if code != 0 || !strings.Contains(stderr, `msg="configuration is valid"`) || !strings.Contains(stderr, "tool_metadata_entries=14") {
		t.Errorf("good file: exit %d\n%s", code, stderr)
	}
}

// TestEvalToolMetadata: eval --tool-metadata gives a bare envelope the
// annotations run would give a bridged tool's call, so the example
// policies decide it as they would in the space.
func TestEvalToolMetadata(t *testing.T) {
	parallelCLI(t)
	dir := t.TempDir()
	proposal := func(name, tool, path string) string {
		t.Helper()
		file := filepath.Join(dir, name)
		env := `{"protocol":"mew/v0.4","id":"p-1","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"` + tool + `","arguments":{"path":"` + path + `"}}}}`
		if err := os.WriteFile(file, []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	tree := proposal("tree.json", "directory_tree", "/srv/app")
	mkdir := proposal("mkdir.json", "create_directory", "/srv/prod/logs")
	eval := func(input string, extra ...string) (map[string]any, string, int) {
		t.Helper()
		args := append([]string{"eval", "--policy", examplePolicies, "--data", exampleData, "--policy-timeout", "1m", "--input", input}, extra...)
		stdout, stderr, code := cli(t, "", args...)
		if code != 0 {
			return nil, stderr, code
		}
		d := decode(t, stdout)
		delete(d, "revision")
		return d, stderr, code
	}
	withMeta := []string{"--tool-metadata", exampleToolMetadata, "--tool-server", "fs"}

	// directory_tree has no read-only prefix: declared read-only it runs,
	// undeclared it is refused.
	if d, stderr, _ := eval(tree, withMeta...); d["action"] != "fulfill" || d["message"] != "read-only" || stderr != "" {
		t.Errorf("directory_tree declared: %v %q", d, stderr)
	}
	if d, _, _ := eval(tree); d["action"] != "reject" {
		t.Errorf("directory_tree undeclared: %v", d)
	}
	// create_directory is declared not destructive: one approver, and a
	// grant may be offered; undeclared, MCP's default makes it two.
	if d, _, _ := eval(mkdir, withMeta...); d["action"] != "escalate" || d["quorum"] != 1.0 || d["grantable"] == nil {
		t.Errorf("create_directory declared: %v", d)
	}
	if d, _, _ := eval(mkdir); d["action"] != "escalate" || d["quorum"] != 2.0 || d["grantable"] != nil {
		t.Errorf("create_directory undeclared: %v", d)
	}
	// The input the policy saw: the declaration, the owner named, no
	// owner_annotations (a bridged owner sends none).
	stdout, _, code := cli(t, "", "eval", "--policy", filepath.Join(testPolicies, "echo-tool"), "--input", tree, "--tool-metadata", exampleToolMetadata, "--tool-server", "fs")
	if d := decode(t, stdout); code != 0 || d["message"] != `{"annotations":{"openWorldHint":false,"readOnlyHint":true},"arguments":{"path":"/srv/app"},"name":"directory_tree","server":"fs"}` {
		t.Errorf("input.tool: exit %d %v", code, d)
	}
	// Without --tool-server the owner is unknown: no entry applies, and
	// eval says why.
	d, stderr, _ := eval(tree, "--tool-metadata", exampleToolMetadata)
	if d["action"] != "reject" || stderr != "fulfiller: warning: --tool-metadata: no --tool-server names the tool's owner, so no entry applies (give the participant run would route the call to)\n" {
		t.Errorf("no --tool-server: %v %q", d, stderr)
	}

	bad, want := badToolMetadata(t)
	full := filepath.Join(proposals, "busy-input.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--input", tree, "--tool-metadata", bad, "--tool-server", "fs"}, want},
		{[]string{"--input", full, "--tool-metadata", exampleToolMetadata}, "fulfiller: --tool-metadata and --tool-server complete a bare proposal envelope; --input " + full + " is a full input document, evaluated as it is\n"},
	} {
		args := append([]string{"eval", "--policy", examplePolicies, "--data", exampleData}, tc.args...)
		if stdout, stderr, code := cli(t, "", args...); code != 2 || stdout != "" || stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

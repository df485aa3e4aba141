package main

import (
	"path/filepath"
	"regexp"
	"testing"
)

// TestVersionFlag: `fulfiller --version` prints what `fulfiller version`
// prints and exits 0.
func TestVersionFlag(t *testing.T) {
	want, _, code := cli(t, "", "version")
	if code != 0 || !regexp.MustCompile(`^fulfiller \S+ \(go\S+, \w+/\w+, mew/v0\.4\)\n$`).MatchString(want) {
		t.Fatalf("version: exit %d, %q", code, want)
	}
	for _, flag := range []string{"--version", "-v"} {
		stdout, stderr, code := cli(t, "", flag)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0 and %q", flag, code, stdout, stderr, want)
		}
	}
}

// TestUnknownCommand: a mistyped command is a usage error (exit 2) on one
// line, with cobra's suggestion when it has one.
func TestUnknownCommand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"aprove"}, `fulfiller: unknown command "aprove"; did you mean "approve"? (see fulfiller --help)` + "\n"},
		{[]string{"frobnicate"}, `fulfiller: unknown command "frobnicate" (see fulfiller --help)` + "\n"},
		{[]string{"run", "extra"}, `fulfiller: unknown command "extra" for "fulfiller run"` + "\n"},
		{[]string{"version", "extra"}, `fulfiller: unknown command "extra" for "fulfiller version"` + "\n"},
	}
	for _, tc := range tests {
		stdout, stderr, code := cli(t, "", tc.args...)
		if code != 2 || stderr != tc.want || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// No command at all is not a mistake: the help, exit 0.
	if stdout, _, code := cli(t, ""); code != 0 || !regexp.MustCompile(`(?m)^Available Commands:$`).MatchString(stdout) {
		t.Errorf("no command: exit %d, stdout %q", code, stdout)
	}
}

// TestRegoErrorsAsOPAPrintsThem: a policy with several compile errors
// prints every one of them, each with file:line:column, the offending line
// and a caret, as opa check does; the first line names the file and the
// problem. eval, test and run --check print the same; test exits 1, as
// opa test does, the others 2.
func TestRegoErrorsAsOPAPrintsThem(t *testing.T) {
	dir := filepath.Join(testPolicies, "compile-errors")
	file := filepath.Join(dir, "policy.rego")
	want := "fulfiller: " + file + ":4:46: rego_unsafe_var_error: var msg is unsafe\n" +
		"\tdecision := {\"action\": \"fulfill\", \"message\": msg} if {\n" +
		"\t                                             ^\n" +
		file + ":8:9: rego_unsafe_var_error: var level is unsafe\n" +
		"\trisk := level if input.tool.name == \"write_file\"\n" +
		"\t        ^\n"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"eval", "--policy", dir, "--input", filepath.Join(proposals, "read.json")}, 2},
		{[]string{"test", dir}, 1},
		{[]string{"run", "--gateway", "ws://127.0.0.1:1", "--policy", dir, "--check"}, 2},
	} {
		stdout, stderr, code := cli(t, "", tc.args...)
		if code != tc.code || stdout != "" || stderr != want {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit %d and:\n%s", tc.args, code, stdout, stderr, tc.code, want)
		}
	}
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	opacmd "github.com/open-policy-agent/opa/cmd"
)

// opaMu serialises runs of OPA's command tree: its commands write to
// os.Stdout and os.Stderr, which runOPA points at files while it runs.
var opaMu sync.Mutex

// runOPA runs OPA's own CLI (the command tree opa's main.go runs, from the
// module this binary embeds) in-process with args, and returns what it
// printed and the exit code opa's main would exit with: an
// *opacmd.ExitError's code, 1 for any other error.
func runOPA(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	opaMu.Lock()
	defer opaMu.Unlock()
	dir := t.TempDir()
	outF, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	errF, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	saved, savedErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outF, errF
	root := opacmd.Command(nil, "OPA") // a fresh tree: flags do not carry over
	root.SetArgs(args)
	root.SetOut(outF)
	root.SetErr(errF)
	err = root.Execute()
	os.Stdout, os.Stderr = saved, savedErr
	outF.Close()
	errF.Close()
	if err != nil {
		code = 1
		if e, ok := errors.AsType[*opacmd.ExitError](err); ok {
			code = e.Exit
		}
	}
	return readFile(t, outF.Name()), readFile(t, errF.Name()), code
}

// exitCase is one row of the exit-code table of docs/policies.md: the same
// situation put to opa and to fulfiller, and the code each exits with.
type exitCase struct {
	verb, what string
	opa        []string // opa's arguments
	fulfiller  []string // fulfiller's; nil: the same as opa's
	opaCode    int
	code       int  // fulfiller's
	sameOut    bool // stdout too must be opa's
	note       string
}

// exitCases are the situations a policy author's CI meets, for every verb
// opa also has. Where fulfiller's code differs, the note says why.
func exitCases() []exitCase {
	failing := filepath.Join(testPolicies, "failing")
	broken := filepath.Join(testPolicies, "broken")
	compileErrors := filepath.Join(testPolicies, "compile-errors")
	conflict := filepath.Join(testPolicies, "conflict")
	missing := filepath.Join(testPolicies, "no-such-dir")
	undefined := filepath.Join(testPolicies, "builtin-error")
	busy := filepath.Join(proposals, "busy-input.json")
	write := filepath.Join("testdata", "write-input.json") // a write_file call: the conflict's two rules both apply
	noInput := filepath.Join(proposals, "no-such.json")
	// opa eval's command line for fulfiller eval's: the policy directory
	// and its data, the input document, the decision query.
	opaEval := func(policy, input string, more ...string) []string {
		return append([]string{"eval", "--data", policy, "--input", input}, append(more, "data.fulfiller.decision")...)
	}
	fEval := func(policy, input string) []string {
		return []string{"eval", "--policy", policy, "--input", input}
	}
	return []exitCase{
		{verb: "test", what: "every test passes", opa: []string{"test", examplePolicies}},
		{verb: "test", what: "a test fails", opa: []string{"test", failing}, opaCode: 2, code: 2},
		{verb: "test", what: "coverage under `--threshold`", opa: []string{"test", "--threshold", "100", gapsPolicy}, opaCode: 2, code: 2},
		{verb: "test", what: "no `test_` rules", opa: []string{"test", conflict}},
		{verb: "test", what: "a file does not parse", opa: []string{"test", broken}, opaCode: 1, code: 1},
		{verb: "test", what: "a file does not compile", opa: []string{"test", compileErrors}, opaCode: 1, code: 1},
		{verb: "test", what: "a path does not exist", opa: []string{"test", missing}, opaCode: 1, code: 1},
		{verb: "test", what: "`--threshold` out of range", opa: []string{"test", "--threshold", "200", gapsPolicy}, opaCode: 1, code: 1},
		{verb: "test", what: "an unknown flag", opa: []string{"test", "--nope", gapsPolicy}, opaCode: 1, code: 1},
		{verb: "fmt", what: "`-l`, all formatted", opa: []string{"fmt", "-l", examplePolicies}, sameOut: true},
		{verb: "fmt", what: "`-l`, files to format", opa: []string{"fmt", "-l", unformatted}, sameOut: true},
		{verb: "fmt", what: "`-l --fail`, files to format", opa: []string{"fmt", "-l", "--fail", unformatted}, opaCode: 2, code: 2,
			note: "fulfiller lists every such file, opa stops at the first"},
		{verb: "fmt", what: "`-d`, files to format", opa: []string{"fmt", "-d", unformatted}},
		{verb: "fmt", what: "`-d --fail`, files to format", opa: []string{"fmt", "-d", "--fail", unformatted}, opaCode: 2, code: 2},
		{verb: "fmt", what: "`--fail`, files to format", opa: []string{"fmt", "--fail", unformatted}, opaCode: 2, code: 2,
			note: "fulfiller names every such file on stderr, opa prints \"unexpected diff\" for the first"},
		{verb: "fmt", what: "`--fail`, all formatted", opa: []string{"fmt", "--fail", examplePolicies}},
		{verb: "fmt", what: "a file does not parse", opa: []string{"fmt", "-l", broken}, opaCode: 2, code: 2},
		{verb: "fmt", what: "a path does not exist", opa: []string{"fmt", "-l", missing}, opaCode: 1, code: 1},
		{verb: "check", what: "nothing wrong (`--strict`)", opa: []string{"check", "--strict", examplePolicies}},
		{verb: "check", what: "a file does not parse", opa: []string{"check", broken}, opaCode: 1, code: 1},
		{verb: "check", what: "a file does not compile", opa: []string{"check", compileErrors}, opaCode: 1, code: 1},
		{verb: "check", what: "a `--strict` error", opa: []string{"check", "--strict", contractPolicy}, opaCode: 1, code: 1},
		{verb: "check", what: "a decision breaks the contract", opa: []string{"check", contractPolicy}, opaCode: 0, code: 1,
			note: "only fulfiller knows the decision contract"},
		{verb: "check", what: "a path does not exist", opa: []string{"check", missing}, opaCode: 1, code: 1},
		{verb: "eval", what: "a decision", opa: opaEval(examplePolicies, busy), fulfiller: fEval(examplePolicies, busy)},
		{verb: "eval", what: "a file does not parse", opa: opaEval(broken, busy), fulfiller: fEval(broken, busy), opaCode: 2, code: 2},
		{verb: "eval", what: "the input file does not exist", opa: opaEval(examplePolicies, noInput), fulfiller: fEval(examplePolicies, noInput), opaCode: 2, code: 2},
		{verb: "eval", what: "the policy fails (a conflict)", opa: opaEval(conflict, write), fulfiller: fEval(conflict, write), opaCode: 2, code: 0,
			note: "fulfiller prints the fail-closed decision, reject `policy`, with the error"},
		{verb: "eval", what: "no decision (undefined)", opa: opaEval(undefined, busy, "--fail"), fulfiller: fEval(undefined, busy), opaCode: 1, code: 0,
			note: "opa with `--fail`; fulfiller prints the fail-closed decision"},
	}
}

// TestExitCodesMatchOPA: for each situation of docs/policies.md's
// exit-code table, opa v1.22's own CLI (in-process, the module fulfiller
// embeds) and fulfiller exit with the codes the table says — the same
// code, except where a note says why not — and the table in the guide is
// the one this test prints.
func TestExitCodesMatchOPA(t *testing.T) {
	cases := exitCases()
	for _, tc := range cases {
		name := tc.verb + " " + tc.what
		ostdout, ostderr, ocode := runOPA(t, tc.opa...)
		if ocode != tc.opaCode {
			t.Errorf("%s: opa %q exits %d, the table says %d\nstdout: %s\nstderr: %s", name, tc.opa, ocode, tc.opaCode, ostdout, ostderr)
		}
		fargs := tc.fulfiller
		if fargs == nil {
			fargs = tc.opa
		}
		fstdout, fstderr, fcode := cli(t, "", fargs...)
		if fcode != tc.code {
			t.Errorf("%s: fulfiller %q exits %d, the table says %d\nstdout: %s\nstderr: %s", name, fargs, fcode, tc.code, fstdout, fstderr)
		}
		if tc.code != tc.opaCode && tc.note == "" {
			t.Errorf("%s: a note must say why fulfiller's code differs", name)
		}
		if tc.sameOut && fstdout != ostdout {
			t.Errorf("%s: stdout %q, opa's %q", name, fstdout, ostdout)
		}
	}

	doc := filepath.Join("..", "..", "docs", "policies.md")
	text := readFile(t, doc)
	const begin, end = "<!-- exit codes: generated by TestExitCodesMatchOPA -->\n", "<!-- end of exit codes -->\n"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q section", doc, begin, end)
	}
	want := exitTable(cases)
	if got := text[i+len(begin) : j]; got != want {
		if *updateDocs {
			if err := os.WriteFile(doc, []byte(text[:i+len(begin)]+want+text[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's exit-code table is not the tested one (go test -run TestExitCodesMatchOPA -update-docs rewrites it); want:\n%s", doc, want)
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/policies.md's exit-code table from TestExitCodesMatchOPA's cases")

// exitTable renders the cases as the guide's Markdown table.
func exitTable(cases []exitCase) string {
	var b strings.Builder
	b.WriteString("| command | situation | `opa` | `fulfiller` | |\n|---|---|---|---|---|\n")
	for _, tc := range cases {
		fmt.Fprintf(&b, "| `%s` | %s | %d | %d | %s |\n", tc.verb, tc.what, tc.opaCode, tc.code, tc.note)
	}
	return b.String()
}

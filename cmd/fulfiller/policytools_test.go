package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"
)

var (
	gapsPolicy     = filepath.Join(testPolicies, "gaps")
	contractPolicy = filepath.Join(testPolicies, "contract")
	unformatted    = filepath.Join(testPolicies, "unformatted")
)

// opaCoverageJSON is what opa test --coverage --format json prints for
// paths, computed in-process the way OPA's cmd/test.go does it: its
// loader, its compiler settings, its runner with the cover tracer and the
// default supplementary passes, its JSON encoding.
func opaCoverageJSON(t *testing.T, paths ...string) string {
	t.Helper()
	ctx := t.Context()
	modules, store, err := tester.LoadWithParserOptions(paths, nil, ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
	if err != nil {
		t.Fatal(err)
	}
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Abort(ctx, txn)
	cov := cover.New()
	runner := tester.NewRunner().
		SetCompiler(ast.NewCompiler().
			WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn)).
			WithEnablePrintStatements(true).
			WithCapabilities(ast.CapabilitiesForThisVersion()).
			WithUseTypeCheckAnnotations(true)).
		SetStore(store).
		CapturePrintOutput(true).
		SetCoverageRuns([]cover.Kind{cover.KindIndexExcluded, cover.KindEarlyExit}).
		SetCoverageQueryTracer(cov).
		SetModules(modules)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		t.Fatal(err)
	}
	for r := range ch {
		if !r.Pass() {
			t.Fatalf("%s failed under OPA", r.Name)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cov.Report(modules)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTestCoverageJSONIsOPAs: `fulfiller test --coverage --format json`
// prints, byte for byte, the coverage report opa test --coverage
// --format json prints for the same files: the examples (fully covered)
// and a policy whose tests leave gaps. (Checked once by hand against the
// opa v1.22.2 binary too: identical output for both.)
func TestTestCoverageJSONIsOPAs(t *testing.T) {
	parallelCLI(t)
	for _, dir := range []string{examplePolicies, gapsPolicy} {
		stdout, stderr, code := cli(t, "", "test", "--coverage", "--format", "json", dir)
		if code != 0 || stderr != "" {
			t.Fatalf("%s: exit %d, stderr %q", dir, code, stderr)
		}
		if want := opaCoverageJSON(t, dir); stdout != want {
			t.Errorf("%s: fulfiller's coverage report:\n%s\nOPA's:\n%s", dir, stdout, want)
		}
	}
	// The gaps are where they are: not-covered lines 7-10 of the policy.
	stdout, _, _ := cli(t, "", "test", "--coverage", "--format", "json", gapsPolicy)
	var rep cover.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	fr := rep.Files[filepath.Join(gapsPolicy, "policy.rego")]
	if fr == nil || fr.NotCoveredLines != 4 || !fr.IsNotCovered(7) || !fr.IsNotCovered(10) || fr.IsNotCovered(11) {
		t.Errorf("gaps report: %+v", fr)
	}
}

// TestTestCoveragePretty: the terminal report gives the total, each file's
// percentage and every line no test reached with its rule.
func TestTestCoveragePretty(t *testing.T) {
	stdout, stderr, code := cli(t, "", "test", "--coverage", gapsPolicy)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	p, pt := filepath.Join(gapsPolicy, "policy.rego"), filepath.Join(gapsPolicy, "policy_test.rego")
	pad := strings.Repeat(" ", len(pt)-len(p))
	want := "2 passed, 0 failed\n" +
		"coverage: 63.64% (7 of 11 lines)\n" +
		"  " + p + pad + "   42.86%\n" +
		"  " + pt + "  100.00%\n" +
		"  not covered: " + p + ":7-8 (rule decision)\n" +
		"  not covered: " + p + ":9-10 (rule decision, else branch)\n"
	if !strings.HasSuffix(stdout, want) {
		t.Errorf("stdout:\n%s\nwant it to end with:\n%s", stdout, want)
	}
}

// TestTestThreshold: under the threshold is exit 2 with OPA's message, as
// opa test --threshold; at or over it, exit 0; the threshold implies
// coverage.
func TestTestThreshold(t *testing.T) {
	parallelCLI(t)
	stdout, stderr, code := cli(t, "", "test", "--threshold", "90", gapsPolicy)
	if code != 2 || stderr != "fulfiller: Code coverage threshold not met: got 63.64 instead of 90.00\n" {
		t.Errorf("under: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "coverage: 63.64%") {
		t.Errorf("under: the report is printed all the same:\n%s", stdout)
	}
	if _, stderr, code := cli(t, "", "test", "--threshold", "63.5", gapsPolicy); code != 0 || stderr != "" {
		t.Errorf("over: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := cli(t, "", "test", "--coverage", "--threshold", "100", examplePolicies); code != 0 || stderr != "" {
		t.Errorf("examples at 100: exit %d, stderr %q", code, stderr)
	}
	// Failing tests are exit 2 whatever the coverage, as in opa test.
	if _, _, code := cli(t, "", "test", "--threshold", "1", filepath.Join(testPolicies, "failing")); code != 2 {
		t.Errorf("failing tests: exit %d, want 2", code)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--threshold", "101"}, "fulfiller: --threshold 101: want a percentage from 0 to 100\n"},
		{[]string{"--threshold", "-1"}, "fulfiller: --threshold -1: want a percentage from 0 to 100\n"},
		{[]string{"--coverage", "--bench"}, "fulfiller: --bench: coverage (--coverage, --threshold) is not measured while benchmarking\n"},
		{[]string{"--format", "xml"}, "fulfiller: --format \"xml\": want pretty or json\n"},
	} {
		stdout, stderr, code := cli(t, "", append(append([]string{"test"}, tc.args...), gapsPolicy)...)
		if code != 1 || stderr != tc.want || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 (opa test's) and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// TestTestJSON: --format json is OPA's JSON of the test results, in source
// order, and the exit code still says whether they passed.
func TestTestJSON(t *testing.T) {
	stdout, stderr, code := cli(t, "", "test", "--format", "json", filepath.Join(testPolicies, "failing"))
	if code != 2 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var results []tester.Result
	if err := json.Unmarshal([]byte(stdout), &results); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	file := filepath.Join(testPolicies, "failing", "policy_test.rego")
	if len(results) != 2 ||
		results[0].Name != "test_fulfils" || results[0].Package != "data.fulfiller_test" || results[0].Fail || results[0].Location.File != file || results[0].Location.Row != 5 ||
		results[1].Name != "test_rejects_writes" || !results[1].Fail || results[1].Location.Row != 8 {
		t.Errorf("results:\n%s", stdout)
	}
	// With --coverage but failing tests: the results, not a coverage
	// report (as opa test, which reports failures instead).
	stdout, _, code = cli(t, "", "test", "--coverage", "--format", "json", filepath.Join(testPolicies, "failing"))
	if code != 2 || !strings.HasPrefix(stdout, "[\n") {
		t.Errorf("coverage of failing tests: exit %d:\n%s", code, stdout)
	}
}

// TestTestBench: --bench measures each test and prints ns/op as go test
// -bench and opa test --bench do.
func TestTestBench(t *testing.T) {
	// A fixed iteration count keeps this quick; the flag exists in test
	// binaries, and fulfiller's own benchmark run initialises it.
	old := flag.Lookup("test.benchtime").Value.String()
	if err := flag.Set("test.benchtime", "20x"); err != nil {
		t.Fatal(err)
	}
	defer flag.Set("test.benchtime", old)
	stdout, stderr, code := cli(t, "", "test", "--bench", gapsPolicy)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	line := regexp.MustCompile(`(?m)^PASS  data\.fulfiller_test\.test_(lists_are_fulfilled|default_rejects)\t +20\t +\d+ ns/op\t.*\d+ B/op\t +\d+ allocs/op$`)
	if n := len(line.FindAllString(stdout, -1)); n != 2 || !strings.HasSuffix(stdout, "\n2 passed, 0 failed\n") {
		t.Errorf("%d benchmark lines:\n%s", n, stdout)
	}
}

// TestCheckCommand: check reports what opa check --strict reports (here an
// unused import and an unused variable) and the contract errors, all at
// once, in line order, each with the line and a caret; exit 1. Without
// --strict the unknown key is a warning and OPA's strict errors are not
// errors.
func TestCheckCommand(t *testing.T) {
	parallelCLI(t)
	p := filepath.Join(contractPolicy, "policy.rego")
	lines := strings.Split(readFile(t, p), "\n")
	// As OPA renders a source line: leading tabs dropped, the caret
	// under the column.
	item := func(row, col int, code, msg string) string {
		line := strings.TrimLeft(lines[row-1], "\t")
		indent := col - 1 - (len(lines[row-1]) - len(line))
		return p + ":" + strconv.Itoa(row) + ":" + strconv.Itoa(col) + ": " + code + ": " + msg + "\n\t" + line + "\n\t" + strings.Repeat(" ", indent) + "^\n"
	}
	const ce = "fulfiller_contract_error"
	unknownKey := `decision key "aprovers" is not part of the contract (action, reason, message, target, approvers, quorum, timeout, editable, grantable, task, task_timeout, notify_arguments, reminders, escalate_to); the sidecar keeps it only for the decision log`
	contract := []string{
		item(7, 21, ce, `decision has no "action": every decision needs action fulfill, reject or escalate`),
		item(9, 44, ce, `malformed decision: reason: "nope" is not a reason code (policy, busy, incapable, timeout, invalid, duplicate, resource_limit, unsafe, disagree, other, inappropriate, no_longer_needed)`),
		item(11, 24, ce, `malformed decision: action: "allow" is not fulfill, reject or escalate`),
		item(13, 70, ce, `malformed decision: quorum: 2 approvals needed but only 1 approvers named`),
		item(13, 84, ce, `malformed decision: timeout: "soon" is not a duration such as "5m" or "90s"`),
	}
	rest := []string{
		item(17, 13, ce, `malformed decision: reason: a reject needs a reason code`),
	}
	last := []string{
		item(22, 42, ce, `malformed decision: grantable.scope: must pin tool: a grant is for calls of one tool`),
		item(22, 42, ce, `malformed decision: grantable: only an escalate decision may offer a grant, this one is fulfill`),
	}
	strict := "fulfiller: " + item(5, 1, "rego_compile_error", "import data.fulfiller.helpers unused") +
		strings.Join(contract, "") + item(13, 92, ce, unknownKey) + strings.Join(rest, "") +
		item(21, 2, "rego_compile_error", "assigned var x unused") + strings.Join(last, "")
	stdout, stderr, code := cli(t, "", "check", "--strict", contractPolicy)
	if code != 1 || stdout != "" || stderr != strict {
		t.Errorf("--strict: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, stdout, stderr, strict)
	}

	plain := "fulfiller: warning: " + item(13, 92, "fulfiller_contract_warning", unknownKey) +
		"fulfiller: " + strings.Join(contract, "") + strings.Join(rest, "") + strings.Join(last, "")
	stdout, stderr, code = cli(t, "", "check", contractPolicy)
	if code != 1 || stdout != "" || stderr != plain {
		t.Errorf("plain: exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, stdout, stderr, plain)
	}

	for _, args := range [][]string{{"check", "--strict", examplePolicies}, {"check", gapsPolicy}} {
		if stdout, stderr, code := cli(t, "", args...); code != 0 || stdout != "" || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a silent 0", args, code, stdout, stderr)
		}
	}
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "fulfiller: name at least one policy file or directory to check (or --tool-metadata FILE)\n"},
		{[]string{"check", missing}, "fulfiller: " + missing + ": no such file or directory\n"},
		{[]string{"check", exampleData}, "fulfiller: " + exampleData + ": not a .rego file\n"},
		{[]string{"check", "--strcit", examplePolicies}, "fulfiller: unknown flag: --strcit\n"},
	} {
		if stdout, stderr, code := cli(t, "", tc.args...); code != 1 || stdout != "" || stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 (opa check's) and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// TestTwoErrorsInTwoFiles: a parse error in each of two files: eval, test,
// check and replay all show both, each with file:line:col, the line and a
// caret.
func TestTwoErrorsInTwoFiles(t *testing.T) {
	dir := filepath.Join(testPolicies, "two-files")
	both := filepath.Join(dir, "a.rego") + ":5:1: rego_parse_error: unexpected } token\n\t}\n\t^\n" +
		filepath.Join(dir, "b.rego") + ":4:13: rego_parse_error: unexpected eq token\n\tinput.x = = 1\n\t          ^\n"
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"eval", "--policy", dir, "--input", filepath.Join(proposals, "read.json")}, 2},
		{[]string{"test", dir}, 1},
		{[]string{"check", dir}, 1},
		{[]string{"replay", "--decision-log", replayLog, "--policy", dir}, 2},
		{[]string{"fmt", "-l", dir}, 2},
	} {
		stdout, stderr, code := cli(t, "", tc.args...)
		want := "fulfiller: " + both
		if tc.args[0] == "fmt" {
			// fmt formats file by file: one report each.
			want = "fulfiller: " + strings.Replace(both, "\n"+filepath.Join(dir, "b.rego"), "\nfulfiller: "+filepath.Join(dir, "b.rego"), 1)
		}
		if code != tc.code || stdout != "" || stderr != want {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit %d and:\n%s", tc.args, code, stdout, stderr, tc.code, want)
		}
	}
}

// TestFmtCommand: -l lists what opa fmt -l lists (TestExitCodesMatchOPA
// compares it with opa's), -d prints a unified diff, -w rewrites, a plain
// fmt prints the formatted text; a difference is exit 0, and 2 with
// --fail, as in opa fmt.
func TestFmtCommand(t *testing.T) {
	p, pt := filepath.Join(unformatted, "policy.rego"), filepath.Join(unformatted, "policy_test.rego")
	stdout, stderr, code := cli(t, "", "fmt", "-l", unformatted)
	if code != 0 || stderr != "" || stdout != p+"\n"+pt+"\n" {
		t.Errorf("-l: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// --fail: every file listed all the same (opa stops at the first).
	stdout, stderr, code = cli(t, "", "fmt", "-l", "--fail", unformatted)
	if code != 2 || stderr != "" || stdout != p+"\n"+pt+"\n" {
		t.Errorf("-l --fail: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, dir := range []string{examplePolicies, gapsPolicy, contractPolicy} {
		if stdout, stderr, code := cli(t, "", "fmt", "-l", dir); code != 0 || stdout != "" || stderr != "" {
			t.Errorf("-l %s: exit %d, stdout %q, stderr %q", dir, code, stdout, stderr)
		}
	}

	wantDiff := "--- " + p + ".orig\n+++ " + p + "\n" +
		"@@ -1,7 +1,7 @@\n" +
		" package fulfiller\n" +
		" \n" +
		"-default decision := {\"action\":\"reject\",\"reason\":\"policy\"}\n" +
		"+default decision := {\"action\": \"reject\", \"reason\": \"policy\"}\n" +
		" \n" +
		" decision := {\"action\": \"fulfill\"} if {\n" +
		"-    input.method == \"tools/list\"\n" +
		"+\tinput.method == \"tools/list\"\n" +
		" }\n"
	if stdout, stderr, code := cli(t, "", "fmt", "-d", p); code != 0 || stderr != "" || stdout != wantDiff {
		t.Errorf("-d: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, wantDiff)
	}

	formatted := "package fulfiller\n\ndefault decision := {\"action\": \"reject\", \"reason\": \"policy\"}\n\n" +
		"decision := {\"action\": \"fulfill\"} if {\n\tinput.method == \"tools/list\"\n}\n"
	if stdout, stderr, code := cli(t, "", "fmt", p); code != 0 || stderr != "" || stdout != formatted {
		t.Errorf("plain: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	// --fail alone is a check, as opa fmt --fail: no text (a directory's
	// files printed run together named none of them, issue 42), but each
	// file that needs formatting, by name, on stderr; exit 2.
	want := "fulfiller: " + p + ": unexpected diff: needs formatting (fmt -d shows how, fmt -w does it)\n" +
		"fulfiller: " + pt + ": unexpected diff: needs formatting (fmt -d shows how, fmt -w does it)\n"
	if stdout, stderr, code := cli(t, "", "fmt", "--fail", unformatted); code != 2 || stderr != want || stdout != "" {
		t.Errorf("--fail DIR: exit %d, stderr %q, stdout:\n%s\nwant exit 2, no stdout and stderr %q", code, stderr, stdout, want)
	}
	if stdout, stderr, code := cli(t, "", "fmt", "--fail", examplePolicies); code != 0 || stderr != "" || stdout != "" {
		t.Errorf("--fail on formatted policies: exit %d, stderr %q, stdout %q; want nothing", code, stderr, stdout)
	}

	// -w on a copy: rewritten in place, permissions kept, nothing left
	// beside it; then -l finds nothing.
	dir := t.TempDir()
	cp := filepath.Join(dir, "policy.rego")
	if err := os.WriteFile(cp, []byte(readFile(t, p)), 0o640); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := cli(t, "", "fmt", "-l", "-w", dir); code != 0 || stderr != "" || stdout != cp+"\n" {
		t.Errorf("-l -w: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if got := readFile(t, cp); got != formatted {
		t.Errorf("after -w:\n%s", got)
	}
	if info, err := os.Stat(cp); err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("mode after -w: %v %v", info.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("-w left %d files in the directory", len(entries))
	}
	if stdout, _, code := cli(t, "", "fmt", "-l", dir); code != 0 || stdout != "" {
		t.Errorf("-l after -w: exit %d, stdout %q", code, stdout)
	}

	missing := filepath.Join(dir, "nope.rego")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fmt"}, "fulfiller: name at least one policy file or directory to format\n"},
		{[]string{"fmt", "-l", missing}, "fulfiller: " + missing + ": no such file or directory\n"},
		{[]string{"fmt", "-x", dir}, "fulfiller: unknown shorthand flag: 'x' in -x\n"},
	} {
		if stdout, stderr, code := cli(t, "", tc.args...); code != 1 || stdout != "" || stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 (opa fmt's) and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckReminders: check reports bad reminders and escalate_to tiers
// with file, line and column like the other contract errors, and exits 1;
// the same fields written right pass.
func TestCheckReminders(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.rego")
	src := `package fulfiller

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "escalate", "approvers": ["alice"], "timeout": "4m", "reminders": ["2m"], "escalate_to": [{"after": "3m", "approvers": ["lead"]}]} if input.x == 1

decision := {"action": "escalate", "timeout": "4m", "reminders": ["4m"]} if input.x == 2

decision := {"action": "escalate", "escalate_to": [{"after": "3m", "approvers": ["lead"]}, {"after": "1m", "approvers": []}]} if input.x == 3
`
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "fulfiller: " +
		p + `:7:66: fulfiller_contract_error: malformed decision: reminders: 4m is not before the timeout 4m: the prompt has ended by then` + "\n" +
		"\t" + `decision := {"action": "escalate", "timeout": "4m", "reminders": ["4m"]} if input.x == 2` + "\n\t" + strings.Repeat(" ", 65) + "^\n" +
		p + `:9:51: fulfiller_contract_error: malformed decision: escalate_to[1].approvers: must name at least one approver` + "\n" +
		"\t" + `decision := {"action": "escalate", "escalate_to": [{"after": "3m", "approvers": ["lead"]}, {"after": "1m", "approvers": []}]} if input.x == 3` + "\n\t" + strings.Repeat(" ", 50) + "^\n"
	stdout, stderr, code := cli(t, "", "check", p)
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, stdout, stderr, want)
	}
}

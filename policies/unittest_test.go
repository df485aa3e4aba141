package policies

import (
	"bytes"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestRunTestsExamples(t *testing.T) {
	report, err := RunTests(t.Context(), []string{"../examples/policies"}, TestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || report.Count(TestPass) < 20 || report.Count(TestPass) != len(report.Results) {
		var b bytes.Buffer
		report.WriteText(&b, true)
		t.Fatalf("examples: %d results, %d passed\n%s", len(report.Results), report.Count(TestPass), b.String())
	}
	var b bytes.Buffer
	if err := report.WriteText(&b, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !regexp.MustCompile(`(?m)^PASS  data\.fulfiller\.readonly_test\.test_read_only_hint_fulfils \(.+\)$`).MatchString(out) {
		t.Errorf("no PASS line for test_read_only_hint_fulfils:\n%s", out)
	}
	// The path helper the guide shows (paths.rego), with its tests for
	// "..", "//" and encoded dots, and production's use of it (issue 42).
	for _, name := range []string{
		"paths_test.test_clean_dot_dot", "paths_test.test_clean_double_slash", "paths_test.test_clean_encoded_dots",
		"paths_test.test_under_refuses_what_startswith_lets_through",
		"production_test.test_encoded_production_path_escalates", "production_test.test_dotted_and_doubled_production_paths_escalate",
	} {
		if !regexp.MustCompile(`(?m)^PASS  data\.fulfiller\.` + regexp.QuoteMeta(name) + ` \(.+\)$`).MatchString(out) {
			t.Errorf("no PASS line for %s:\n%s", name, out)
		}
	}
	if !strings.HasSuffix(out, "\n"+strconv.Itoa(len(report.Results))+" passed, 0 failed\n") {
		t.Errorf("summary line missing:\n%s", out)
	}
	// Results are in file and line order.
	first := report.Results[0]
	if !strings.HasSuffix(first.Location, "jobs_test.rego:11") {
		t.Errorf("first result %s at %s", first.Name, first.Location)
	}
}

func TestRunTestsFailures(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n",
		"p_test.rego": `package fulfiller_test

import data.fulfiller

test_passes if fulfiller.decision.action == "fulfill"

test_fails if {
	print("decision was", fulfiller.decision)
	fulfiller.decision.action == "reject"
}

level(_) := 1

level(_) := 2

test_errors if level(1) == 1

todo_test_later if false
`,
		"data.json": `{"limit": 3}`,
	})
	report, err := RunTests(t.Context(), []string{dir}, TestOptions{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TestStatus{}
	for _, r := range report.Results {
		got[r.Name] = r.Status
	}
	want := map[string]TestStatus{
		"data.fulfiller_test.test_passes":     TestPass,
		"data.fulfiller_test.test_fails":      TestFail,
		"data.fulfiller_test.test_errors":     TestError,
		"data.fulfiller_test.todo_test_later": TestSkip,
	}
	for name, status := range want {
		if got[name] != status {
			t.Errorf("%s: %s, want %s (all: %v)", name, got[name], status, got)
		}
	}
	if report.OK() {
		t.Error("report OK with failures")
	}
	var b bytes.Buffer
	report.WriteText(&b, true)
	out := b.String()
	for _, want := range []string{
		"FAIL  data.fulfiller_test.test_fails",
		"ERROR data.fulfiller_test.test_errors",
		"SKIP  data.fulfiller_test.todo_test_later\n",
		"decision was {\"action\": \"fulfill\"}", // print output of the failing test
		"p_test.rego:9",                          // verbose trace names the failing line
		"eval_conflict_error",                    // the error of the erroring test
		"\n1 passed, 2 failed, 1 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// --run selects tests.
	report, err = RunTests(t.Context(), []string{dir}, TestOptions{Run: "test_passes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Results) != 1 || !report.OK() {
		t.Errorf("filtered run: %+v", report.Results)
	}
}

func TestRunTestsLoadErrors(t *testing.T) {
	dir := writeTree(t, map[string]string{"bad_test.rego": "package x\n\ntest_a if {\n\t1 ==\n}\n"})
	_, err := RunTests(t.Context(), []string{dir}, TestOptions{})
	var le *LoadError
	if !errors.As(err, &le) || le.File != filepath.Join(dir, "bad_test.rego") || le.Line == 0 {
		t.Errorf("err = %v, want a LoadError naming bad_test.rego and a line", err)
	}
	if _, err := RunTests(t.Context(), []string{filepath.Join(dir, "missing")}, TestOptions{}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing path: %v", err)
	}
	if _, err := RunTests(t.Context(), []string{"--run"}, TestOptions{Run: "("}); err == nil {
		t.Error("no error")
	}
}

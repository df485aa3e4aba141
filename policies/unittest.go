package policies

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// TestOptions configure RunTests.
type TestOptions struct {
	// Run selects tests whose full name (data.pkg.test_x) matches this
	// regular expression, like opa test --run. Empty runs all.
	Run string
	// Verbose records the evaluation trace of failing tests.
	Verbose bool
	// Timeout bounds each test; 5s (opa test's default) when zero.
	Timeout time.Duration
}

// TestStatus is the outcome of one test.
type TestStatus string

// Test outcomes.
const (
	TestPass  TestStatus = "PASS"
	TestFail  TestStatus = "FAIL"
	TestError TestStatus = "ERROR"
	TestSkip  TestStatus = "SKIP" // todo_test_ rules
)

// TestResult is one Rego test.
type TestResult struct {
	Name     string // full name, e.g. data.fulfiller.readonly_test.test_reads_pass
	Location string // file:line of the test
	Status   TestStatus
	Duration time.Duration
	Err      error  // set for TestError
	Output   string // the test's print() output
	Trace    string // evaluation trace, for failures when Verbose
}

// TestReport is the outcome of a RunTests call, in file and line order.
type TestReport struct {
	Results []TestResult
}

// Count returns how many tests ended with status s.
func (r TestReport) Count(s TestStatus) int {
	n := 0
	for _, t := range r.Results {
		if t.Status == s {
			n++
		}
	}
	return n
}

// OK reports whether no test failed or errored.
func (r TestReport) OK() bool {
	return r.Count(TestFail) == 0 && r.Count(TestError) == 0
}

// WriteText prints one line per test ("PASS data.x.test_y (1.2ms)"),
// the details of failures and errors below their line, and a summary line
// "N passed, M failed" (errors count as failed).
func (r TestReport) WriteText(w io.Writer, verbose bool) error {
	var b bytes.Buffer
	for _, t := range r.Results {
		fmt.Fprintf(&b, "%-5s %s", t.Status, t.Name)
		if t.Status != TestSkip {
			fmt.Fprintf(&b, " (%s)", t.Duration.Round(time.Microsecond))
		}
		b.WriteByte('\n')
		if t.Status == TestPass && !verbose {
			continue
		}
		if (t.Status == TestFail || t.Status == TestError) && t.Location != "" {
			fmt.Fprintf(&b, "      %s\n", t.Location)
		}
		if t.Err != nil {
			fmt.Fprintf(&b, "      %s\n", indent(t.Err.Error(), "      "))
		}
		if t.Output != "" {
			fmt.Fprintf(&b, "      %s\n", indent(strings.TrimSpace(t.Output), "      "))
		}
		if t.Trace != "" {
			fmt.Fprintf(&b, "      %s\n", indent(strings.TrimRight(t.Trace, "\n"), "      "))
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed", r.Count(TestPass), r.Count(TestFail)+r.Count(TestError))
	if n := r.Count(TestSkip); n > 0 {
		fmt.Fprintf(&b, ", %d skipped", n)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// RunTests runs the Rego unit tests (test_* rules) found under paths, the
// way opa test does: every .rego file and every JSON/YAML data document
// under the paths is loaded (data under a subdirectory is mounted at that
// subdirectory's path), so a directory that passes here passes under
// opa test too. The error is for files that cannot be loaded or compiled
// (naming file and line); failing tests are in the report.
func RunTests(ctx context.Context, paths []string, opts TestOptions) (TestReport, error) {
	if len(paths) == 0 {
		return TestReport{}, fmt.Errorf("no test paths given")
	}
	if _, err := regexp.Compile(opts.Run); err != nil {
		return TestReport{}, fmt.Errorf("test filter %q: %w", opts.Run, err)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return TestReport{}, &LoadError{File: p, Err: unwrapPathError(err)}
		}
	}
	modules, store, err := tester.LoadWithParserOptions(paths, skipHidden, parserOptions)
	if err != nil {
		return TestReport{}, loaderError(err)
	}
	if len(modules) == 0 {
		return TestReport{}, fmt.Errorf("no .rego files in %s", strings.Join(paths, ", "))
	}
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return TestReport{}, fmt.Errorf("test store: %w", err)
	}
	defer store.Abort(ctx, txn)

	compiler := ast.NewCompiler().
		WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn)).
		WithEnablePrintStatements(true).
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithUseTypeCheckAnnotations(true)
	runner := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		EnableTracing(opts.Verbose).
		SetTimeout(cmp.Or(opts.Timeout, 5*time.Second)).
		Filter(opts.Run)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return TestReport{}, regoError("", err, nil)
	}
	var report TestReport
	for r := range ch {
		report.Results = append(report.Results, testResult(r, opts.Verbose))
	}
	// Results arrive in completion order; report them in source order.
	slices.SortFunc(report.Results, func(a, b TestResult) int {
		return cmp.Or(cmpLocation(a.Location, b.Location), strings.Compare(a.Name, b.Name))
	})
	return report, nil
}

func testResult(r *tester.Result, verbose bool) TestResult {
	t := TestResult{
		Name:     r.Package + "." + r.Name,
		Duration: r.Duration,
		Output:   string(r.Output),
	}
	if r.Location != nil {
		t.Location = r.Location.String()
	}
	switch {
	case r.Skip:
		t.Status = TestSkip
	case r.Error != nil:
		t.Status, t.Err = TestError, r.Error
	case r.Fail:
		t.Status = TestFail
	default:
		t.Status = TestPass
	}
	// Parameterised tests report sub-results; a failing one fails the test.
	if t.Status == TestPass {
		for _, sr := range r.SubResults.Iter {
			if sr.Fail {
				t.Status = TestFail
				break
			}
		}
	}
	if verbose && t.Status == TestFail && len(r.Trace) > 0 {
		var b bytes.Buffer
		topdown.PrettyTraceWithLocation(&b, r.Trace)
		t.Trace = b.String()
	}
	return t
}

// cmpLocation orders "file:line" strings by file, then numerically by line.
func cmpLocation(a, b string) int {
	fa, la := splitLocation(a)
	fb, lb := splitLocation(b)
	return cmp.Or(strings.Compare(fa, fb), cmp.Compare(la, lb))
}

func splitLocation(loc string) (string, int) {
	i := strings.LastIndexByte(loc, ':')
	if i < 0 {
		return loc, 0
	}
	var n int
	fmt.Sscanf(loc[i+1:], "%d", &n)
	return loc[:i], n
}

// skipHidden keeps editor droppings and .git out of test runs.
func skipHidden(_ string, info os.FileInfo, depth int) bool {
	return depth > 0 && isHidden(info.Name())
}

// loaderError turns opa's loader errors into a LoadError naming the first
// one's file and line, keeping every error for Pretty.
func loaderError(err error) error {
	errs, ok := err.(loader.Errors)
	if !ok || len(errs) == 0 {
		return err
	}
	var rego ast.Errors
	var other []error
	for _, e := range errs {
		if ae, ok := e.(*ast.Error); ok {
			rego = append(rego, ae)
		} else {
			other = append(other, e)
		}
	}
	if len(rego) == 0 {
		if len(errs) > 1 {
			return fmt.Errorf("%w (and %d more errors)", errs[0], len(errs)-1)
		}
		return errs[0]
	}
	le := regoError("", rego, nil).(*LoadError)
	le.More += len(other)
	le.Other = other
	return le
}

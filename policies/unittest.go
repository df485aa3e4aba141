package policies

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/lineage"
)

// TestOptions configure RunTests.
type TestOptions struct {
	// Run selects tests whose full name (data.pkg.test_x) matches this
	// regular expression, like opa test --run. Empty runs all.
	Run string
	// Verbose records the evaluation trace of failing tests.
	Verbose bool
	// Timeout bounds each test; 5s (opa test's default) when zero, 30s
	// when benchmarking (as opa test --bench).
	Timeout time.Duration
	// Coverage measures which lines of the policies the tests reached,
	// with OPA's cover package as opa test --coverage does (TestReport.Coverage).
	Coverage bool
	// Bench benchmarks each test instead of running it once, as
	// opa test --bench does (TestResult.Bench). It cannot be combined with
	// Coverage: the tracer would be measured along.
	Bench bool
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
	// Bench is the benchmark of a passing test when TestOptions.Bench.
	Bench *testing.BenchmarkResult

	raw *tester.Result // as OPA reported it, for WriteJSON
}

// TestReport is the outcome of a RunTests call, in file and line order.
type TestReport struct {
	Results []TestResult
	// Coverage is OPA's coverage report (the JSON of
	// opa test --coverage) when TestOptions.Coverage; nil otherwise.
	Coverage *cover.Report

	// MissingData lists the data documents the policies (the modules
	// without test_ rules) read and no data file under the paths
	// provides, as Engine.MissingData does for run and eval: a test
	// that does not give them (with data.x as …) sees them undefined.
	MissingData []string

	modules map[string]*ast.Module // the loaded modules, to name rules in WriteCoverage
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
		if t.Bench != nil {
			// ns/op and the rest as go test -bench (and opa test --bench)
			// print them.
			fmt.Fprintf(&b, "\t%s\t%s\n", t.Bench.String(), t.Bench.MemString())
			continue
		}
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
	if opts.Coverage && opts.Bench {
		return TestReport{}, errors.New("coverage is not measured while benchmarking")
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

	// No error limit: a policy author wants every error at once.
	compiler := ast.NewCompiler().
		SetErrorLimit(0).
		WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn)).
		// As opa test: print() is erased when benchmarking, so that
		// what is measured is the policy.
		WithEnablePrintStatements(!opts.Bench).
		WithCapabilities(ast.CapabilitiesForThisVersion()).
		WithUseTypeCheckAnnotations(true)
	timeout := cmp.Or(opts.Timeout, 5*time.Second)
	if opts.Bench && opts.Timeout == 0 {
		timeout = 30 * time.Second
	}
	runner := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(modules).
		CapturePrintOutput(true).
		EnableTracing(opts.Verbose).
		SetTimeout(timeout).
		Filter(opts.Run)
	var cov *cover.Cover
	if opts.Coverage {
		// The same tracer and supplementary passes (index_excluded,
		// early_exit) as opa test --coverage, so the reports agree.
		cov = cover.New()
		runner.SetCoverageQueryTracer(cov).
			SetCoverageRuns([]cover.Kind{cover.KindIndexExcluded, cover.KindEarlyExit})
	}
	var ch chan *tester.Result
	if opts.Bench {
		// testing.Benchmark reads the testing package's flags, which
		// exist only once it is initialised (opa does the same).
		testing.Init()
		ch, err = runner.RunBenchmarks(ctx, txn, tester.BenchmarkOptions{ReportAllocations: true})
	} else {
		ch, err = runner.RunTests(ctx, txn)
	}
	if err != nil {
		return TestReport{}, regoError("", err, nil)
	}
	report := TestReport{modules: modules}
	for r := range ch {
		report.Results = append(report.Results, testResult(r, opts.Verbose))
	}
	if cov != nil {
		rep := cov.Report(modules)
		report.Coverage = &rep
	}
	if report.MissingData, err = missingTestData(ctx, store, txn, compiler.Modules); err != nil {
		return TestReport{}, err
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
		raw:      r,
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
	// As opa test -v: the JSON keeps the notes and failures of the
	// trace, not every step.
	r.Trace = lineage.Filter(r.Trace, func(e *topdown.Event) bool {
		return e.Op == topdown.NoteOp || e.Op == topdown.FailOp
	})
	if t.Status == TestPass && r.BenchmarkResult != nil {
		t.Bench = r.BenchmarkResult
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

// missingTestData is missingData for a test run: the reads of the
// compiled modules that hold no test_ rule (the policies under test),
// against the data the test store was loaded with.
func missingTestData(ctx context.Context, store storage.Store, txn storage.Transaction, compiled map[string]*ast.Module) ([]string, error) {
	policies := map[string]*ast.Module{}
	for name, m := range compiled {
		if !slices.ContainsFunc(m.Rules, func(r *ast.Rule) bool { return strings.HasPrefix(r.Head.Name.String(), tester.TestPrefix) }) {
			policies[name] = m
		}
	}
	v, err := store.Read(ctx, txn, storage.RootPath)
	if err != nil {
		return nil, fmt.Errorf("test store: %w", err)
	}
	data, ok := v.(map[string]any)
	if !ok {
		// A store that keeps AST values: its JSON is the same data.
		if data, err = asJSONObject(v); err != nil {
			return nil, fmt.Errorf("test store: %w", err)
		}
	}
	return missingData(policies, data), nil
}

// asJSONObject turns the store's root (an ast.Value) into a JSON object.
func asJSONObject(v any) (map[string]any, error) {
	val, ok := v.(ast.Value)
	if !ok {
		return nil, fmt.Errorf("data is %T, not an object", v)
	}
	j, err := ast.JSON(val)
	if err != nil {
		return nil, err
	}
	obj, ok := j.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("data is %T, not an object", j)
	}
	return obj, nil
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

// WriteJSON prints the results as opa test --format json does: OPA's own
// JSON of each test result, in source order.
func (r TestReport) WriteJSON(w io.Writer) error {
	ch := make(chan *tester.Result, len(r.Results))
	for _, t := range r.Results {
		ch <- t.raw
	}
	close(ch)
	return tester.JSONReporter{Output: w}.Report(ch)
}

// WriteCoverageJSON prints the coverage report exactly as
// opa test --coverage --format json does.
func (r TestReport) WriteCoverageJSON(w io.Writer) error {
	if r.Coverage == nil {
		return errors.New("no coverage was measured")
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Coverage)
}

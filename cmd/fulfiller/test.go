package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/policies"
)

type testFlags struct {
	verbose   bool
	run       string
	timeout   time.Duration
	coverage  bool
	format    string
	bench     bool
	threshold float64
}

func newTestCmd() *cobra.Command {
	var fl testFlags
	cmd := &cobra.Command{
		Use:   "test PATH...",
		Short: "Run the Rego unit tests (test_ rules) of policies",
		Long: `test runs the Rego unit tests — rules named test_* — in the .rego files under
each PATH, with the JSON and YAML data documents found there, the way
opa test does (a document under a subdirectory is mounted at that
subdirectory's path under data). It prints PASS, FAIL or ERROR per test and
a summary line "N passed, M failed".

--coverage also reports, with OPA's coverage tracer, how much of the
policies the tests reached: per file and in total, and every line no test
reached, with the rule it belongs to. --format json prints what
opa test --format json prints (with --coverage: the coverage report of
opa test --coverage --format json, files with their covered and
not_covered ranges and the coverage percentage). --bench benchmarks each
test (ns/op, B/op, allocs/op, like opa test --bench). --threshold PCT
fails a run whose total coverage is under PCT (it implies --coverage).

Exit codes are opa test's (v1.22): 0 when every test passed (or there are
none), 2 when any failed or errored or — as with --threshold — the
coverage is under --threshold, 1 when a file cannot be loaded or compiled
(the message names the file and line), a path does not exist or a flag or
argument is wrong.`,
		Example: `  fulfiller test examples/policies
  fulfiller test -v --run production examples/policies
  fulfiller test --coverage examples/policies
  fulfiller test --coverage --threshold 90 examples/policies   # in CI
  fulfiller test --bench examples/policies`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return opaUsageErrorf("name at least one policy file or directory to test")
			}
			return runPolicyTests(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args, fl)
		},
	}
	cmd.SetFlagErrorFunc(opaFlagError)
	f := cmd.Flags()
	f.BoolVarP(&fl.verbose, "verbose", "v", false, "print passing tests' output too, and the evaluation trace of failures")
	f.StringVarP(&fl.run, "run", "r", "", "only run tests whose full name (data.pkg.test_x) matches this regular expression, as opa test --run")
	f.DurationVar(&fl.timeout, "timeout", 0, "longest one test may take (default 5s, 30s with --bench)")
	f.BoolVarP(&fl.coverage, "coverage", "c", false, "report which lines of the policies the tests reached")
	f.StringVarP(&fl.format, "format", "f", "pretty", "output format: pretty or json (json as opa test --format json)")
	f.BoolVar(&fl.bench, "bench", false, "benchmark each test (ns/op) instead of running it once")
	f.Float64Var(&fl.threshold, "threshold", 0, "fail (exit 2, as opa test) when total coverage is under this percentage; implies --coverage")
	return cmd
}

func runPolicyTests(ctx context.Context, stdout, stderr io.Writer, paths []string, fl testFlags) error {
	if fl.timeout < 0 {
		return opaUsageErrorf("--timeout %s: must be positive", fl.timeout)
	}
	if fl.format != "pretty" && fl.format != "json" {
		return opaUsageErrorf("--format %q: want pretty or json", fl.format)
	}
	if fl.threshold < 0 || fl.threshold > 100 {
		return opaUsageErrorf("--threshold %g: want a percentage from 0 to 100", fl.threshold)
	}
	// As opa test: a threshold needs the coverage it compares with.
	coverage := fl.coverage || fl.threshold > 0
	if coverage && fl.bench {
		return opaUsageErrorf("--bench: coverage (--coverage, --threshold) is not measured while benchmarking")
	}
	report, err := policies.RunTests(ctx, paths, policies.TestOptions{
		Run: fl.run, Verbose: fl.verbose, Timeout: fl.timeout, Coverage: coverage, Bench: fl.bench,
	})
	if err != nil {
		// opa test: a path, file or --run it cannot use is exit 1.
		return &exitError{code: 1, err: err}
	}
	if len(report.Results) == 0 {
		fmt.Fprintln(stderr, "fulfiller: no test_ rules found")
	}
	if len(report.MissingData) > 0 {
		// As eval and run --check say it: a test that does not give such
		// data (with data.x as …) sees it undefined, and passes or fails
		// for a reason that is not the policy's.
		newEvalLogger(stderr).Warn(fmt.Sprintf("the policies read %s, which no data file under %s provides: a test that does not give it (with %s as …) sees it undefined, so the rules that need it never match",
			strings.Join(report.MissingData, ", "), strings.Join(paths, ", "), report.MissingData[0]))
	}
	// Coverage is reported only when every test passed, as opa test
	// does: lines reached by a failing test say little.
	switch {
	case fl.format == "json" && coverage && report.OK():
		err = report.WriteCoverageJSON(stdout)
	case fl.format == "json":
		err = report.WriteJSON(stdout)
	default:
		err = report.WriteText(stdout, fl.verbose)
		if err == nil && coverage && report.OK() {
			err = report.WriteCoverage(stdout)
		}
	}
	if err != nil {
		return err
	}
	if !report.OK() {
		n := report.Count(policies.TestFail) + report.Count(policies.TestError)
		// opa test's code for failures (1 is its code for files it
		// cannot load): a CI step that ran opa test reads it the same.
		return failedQuietly(2, fmt.Errorf("%d tests failed", n))
	}
	if got := report.Coverage; got != nil && got.Coverage < fl.threshold {
		// OPA's own error, and opa test's exit code for it.
		return usageError(&cover.CoverageThresholdError{Coverage: got.Coverage, Threshold: fl.threshold})
	}
	return nil
}

// opaUsageErrorf is a usage error of a verb opa also has (test, fmt,
// check): exit 1, opa's code for it, not the 2 of fulfiller's other
// commands, so that a CI step written for opa reads fulfiller's codes the
// same (docs/policies.md, "Exit codes").
func opaUsageErrorf(format string, args ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, args...)}
}

// opaFlagError makes a flag cobra cannot parse exit 1 under test, fmt and
// check, as opa's commands do (its main exits 1 on any error that carries
// no code of its own).
func opaFlagError(_ *cobra.Command, err error) error {
	return &exitError{code: 1, err: err}
}

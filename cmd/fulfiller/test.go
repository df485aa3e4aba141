package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/policies"
)

type testFlags struct {
	verbose bool
	run     string
	timeout time.Duration
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

Exit 0 when every test passed, 1 when any failed or errored, 2 when a file
cannot be loaded or compiled (the message names the file and line).`,
		Example: `  fulfiller test examples/policies
  fulfiller test -v --run production examples/policies`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("name at least one policy file or directory to test")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyTests(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args, fl)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&fl.verbose, "verbose", "v", false, "print passing tests' output too, and the evaluation trace of failures")
	f.StringVar(&fl.run, "run", "", "only run tests whose full name (data.pkg.test_x) matches this regular expression")
	f.DurationVar(&fl.timeout, "timeout", 5*time.Second, "longest one test may take")
	return cmd
}

func runPolicyTests(ctx context.Context, stdout, stderr io.Writer, paths []string, fl testFlags) error {
	if fl.timeout <= 0 {
		return usageErrorf("--timeout %s: must be positive", fl.timeout)
	}
	report, err := policies.RunTests(ctx, paths, policies.TestOptions{Run: fl.run, Verbose: fl.verbose, Timeout: fl.timeout})
	if err != nil {
		return usageError(err)
	}
	if len(report.Results) == 0 {
		fmt.Fprintln(stderr, "fulfiller: no test_ rules found")
	}
	if err := report.WriteText(stdout, fl.verbose); err != nil {
		return err
	}
	if !report.OK() {
		n := report.Count(policies.TestFail) + report.Count(policies.TestError)
		return failedQuietly(1, fmt.Errorf("%d tests failed", n))
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/replay"
)

type replayFlags struct {
	decisionLog    string
	policies, data []string
	format         string
	policyTimeout  time.Duration
	bundle         bundleFlags
	maxPending     int
}

func newReplayCmd() *cobra.Command {
	var fl replayFlags
	cmd := &cobra.Command{
		Use:   "replay --decision-log FILE --policy NEW [--data PATH] [--format pretty|json]",
		Short: "Re-decide a decision log's proposals with a candidate policy and show what would change",
		Long: `replay decides every proposal of a decision log again with a candidate policy,
from the input the log recorded (so "now", pending counts and participants are
as they were), and prints what would change: counts per old → new action, the
proposals that change, and how the candidate scores against the human answers
(false approvals: it would fulfil what a human declined; needless asks: it
would escalate or reject what humans approved).

Only each proposal's first decision is scored; decisions asked again after a
human edited the call are replayed and counted apart. Masked inputs are
replayed without their erased values, and counted. The log is streamed: a
progress bar is drawn on stderr when it is a terminal.

Exit 0 when the log was replayed (whatever changed), 2 when a flag, the log,
or a policy or data file cannot be used.`,
		Example: `  fulfiller replay --decision-log /var/log/fulfiller/decisions.jsonl \
      --policy ./candidate --data ./candidate/data.yaml --format json`,
		Args: noPositionalArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplay(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.decisionLog, "decision-log", "", "decision log to replay: a file, or - for stdin (required)")
	f.StringArrayVar(&fl.policies, "policy", nil, "candidate Rego policy file or directory (repeatable, required)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document for the policies (repeatable)")
	f.StringVar(&fl.format, "format", "pretty", "output: pretty, or json (one document, for CI)")
	fl.bundle.registerVerification(f)
	f.DurationVar(&fl.policyTimeout, "policy-timeout", policies.DefaultTimeout, "longest one evaluation may take (then: reject policy)")
	f.IntVar(&fl.maxPending, "max-pending", replay.DefaultMaxPending, "most proposals held while awaiting their human answer (the oldest are evicted beyond)")
	return cmd
}

func runReplay(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, fl replayFlags) error {
	if fl.decisionLog == "" {
		return usageErrorf("--decision-log is required: the decision log file to replay, or - for stdin")
	}
	if len(fl.policies) == 0 {
		return usageErrorf("--policy is required: the candidate policy to replay the log with")
	}
	if fl.policyTimeout <= 0 {
		return usageErrorf("--policy-timeout %s: must be positive", fl.policyTimeout)
	}
	if fl.maxPending <= 0 {
		return usageErrorf("--max-pending %d: must be positive", fl.maxPending)
	}
	printer, err := replay.NewPrinter(stdout, fl.format)
	if err != nil {
		return usageErrorf("--format: %v", err)
	}
	in, size := stdin, int64(0)
	if fl.decisionLog != "-" {
		f, err := os.Open(fl.decisionLog)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return usageErrorf("--decision-log %s: %v", fl.decisionLog, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return usageErrorf("--decision-log %s: %v", fl.decisionLog, err)
		}
		if fi.IsDir() {
			return usageErrorf("--decision-log %s: is a directory", fl.decisionLog)
		}
		in, size = f, fi.Size()
	}
	popts := policies.Options{
		Policies: fl.policies,
		Data:     fl.data,
		Timeout:  fl.policyTimeout,
		Logger:   newEvalLogger(stderr),
	}
	if err := fl.bundle.local(&popts); err != nil {
		return err
	}
	engine, err := policies.Load(ctx, popts)
	if err != nil {
		return usageError(err)
	}
	opts := replay.Options{MaxPending: fl.maxPending, OnChange: printer.Change}
	done := func() {}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		opts.OnProgress, done = replay.ProgressBar(stderr, size)
	}
	rep, err := replay.Replay(ctx, in, engine, opts)
	done()
	if err != nil {
		return fmt.Errorf("replay %s: %w", fl.decisionLog, err)
	}
	return printer.Finish(rep)
}

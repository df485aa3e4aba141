package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/replay"
	"github.com/mewkit/fulfiller/policies/suggest"
)

type suggestFlags struct {
	decisionLog    string
	min            int
	out            string
	policies, data []string
	format         string
	policyTimeout  time.Duration
}

func newSuggestCmd() *cobra.Command {
	var fl suggestFlags
	cmd := &cobra.Command{
		Use:   "suggest --decision-log FILE [--min N] [--out DIR] [--policy CURRENT --data PATH] [--format pretty|json]",
		Short: "Propose Rego rules from the calls humans approved again and again",
		Long: `suggest reads the human decisions of a decision log and, for every proposer,
tool and server whose calls humans approved at least --min times with no decline
the pattern would cover, writes a candidate rule (package
fulfiller.suggested.NAME) and its tests into --out: arguments that never changed
are pinned, paths are allowed under their common directory, arguments that
varied are left free (the file says which), and nothing else is allowed.

Nothing is applied: a policy author reviews the files and commits them beside a
main policy that consults data.fulfiller.suggested (one line, see
docs/suggest.md). Each suggestion is replayed against the log, alone and, with
--policy, beside the current policy: false approvals (calls a human declined
that it would fulfil) must be 0, or it is dropped.

Exit 0 when the log was read (with or without suggestions), 2 when a flag, the
log, a policy or data file cannot be used, or a file in --out already exists.`,
		Example: `  fulfiller suggest --decision-log /var/log/fulfiller/decisions.jsonl \
      --out ./policy/suggested --policy ./policy --data ./policy/data.yaml`,
		Args: noPositionalArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSuggest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.decisionLog, "decision-log", "", "decision log to learn from, a file (required; read more than once)")
	f.IntVar(&fl.min, "min", suggest.DefaultMin, "human approvals a proposer, tool and server need for a suggestion")
	f.StringVar(&fl.out, "out", "suggested", "directory to write the suggested .rego files and their tests into")
	f.StringArrayVar(&fl.policies, "policy", nil, "current Rego policy file or directory to score suggestions beside (repeatable)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document for the current policy (repeatable)")
	f.StringVar(&fl.format, "format", "pretty", "output: pretty, or json (one document, for CI)")
	f.DurationVar(&fl.policyTimeout, "policy-timeout", policies.DefaultTimeout, "longest one evaluation may take while replaying")
	return cmd
}

func runSuggest(ctx context.Context, stdout, stderr io.Writer, fl suggestFlags) error {
	switch {
	case fl.decisionLog == "":
		return usageErrorf("--decision-log is required: the decision log file to learn from")
	case fl.decisionLog == "-":
		return usageErrorf("--decision-log -: suggest reads the log more than once (to learn, then to replay); give a file")
	case fl.min < 2:
		return usageErrorf("--min %d: must be at least 2 (one approval is a grant, not a pattern)", fl.min)
	case fl.out == "":
		return usageErrorf("--out: must name a directory")
	case fl.policyTimeout <= 0:
		return usageErrorf("--policy-timeout %s: must be positive", fl.policyTimeout)
	case len(fl.data) > 0 && len(fl.policies) == 0:
		return usageErrorf("--data needs --policy: it is the current policy's data")
	}
	if err := suggest.CheckFormat(fl.format); err != nil {
		return usageErrorf("--format: %v", err)
	}
	open := func() (io.ReadCloser, error) {
		f, err := os.Open(fl.decisionLog)
		if err != nil {
			return nil, usageErrorf("--decision-log %s: %v", fl.decisionLog, unwrapPath(err))
		}
		if fi, err := f.Stat(); err != nil || fi.IsDir() {
			f.Close()
			if err == nil {
				err = errors.New("is a directory")
			}
			return nil, usageErrorf("--decision-log %s: %v", fl.decisionLog, unwrapPath(err))
		}
		return f, nil
	}
	if fi, err := os.Stat(fl.out); err == nil && !fi.IsDir() {
		return usageErrorf("--out %s: not a directory", fl.out)
	}
	var current *suggest.Policy
	if len(fl.policies) > 0 {
		current = &suggest.Policy{Paths: fl.policies, Data: fl.data}
	}
	// Load the current policy first: a policy that does not load is a
	// usage error whatever the log holds.
	scorer, err := suggest.NewScorer(ctx, suggestRego{}, open, current, fl.policyTimeout, newEvalLogger(stderr))
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return usageError(err)
	}
	defer scorer.Close()

	r, err := open()
	if err != nil {
		return err
	}
	res, err := suggest.Learn(ctx, r, suggest.Options{Min: fl.min, Source: filepath.Base(fl.decisionLog), Rego: suggestRego{}})
	r.Close()
	if err != nil {
		return fmt.Errorf("read %s: %w", fl.decisionLog, err)
	}
	if err := scorer.ScoreAll(ctx, res); err != nil {
		return fmt.Errorf("replay %s: %w", fl.decisionLog, err)
	}
	out := ""
	if len(res.Suggestions) > 0 {
		out = fl.out
		if err := writeSuggestions(ctx, fl.out, res.Suggestions); err != nil {
			return err
		}
	}
	return suggest.Print(stdout, fl.format, res, out)
}

// writeSuggestions writes every suggestion's files into dir, refusing to
// replace any file (a reviewed suggestion may have been edited), and runs
// their tests.
func writeSuggestions(ctx context.Context, dir string, ss []suggest.Suggestion) error {
	for _, s := range ss {
		for _, name := range []string{s.RuleFile, s.TestFile} {
			p := filepath.Join(dir, name)
			if _, err := os.Lstat(p); err == nil {
				return usageErrorf("--out %s: %s already exists; move it away or choose another --out", dir, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return usageErrorf("--out %s: %v", dir, unwrapPath(err))
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usageErrorf("--out %s: %v", dir, unwrapPath(err))
	}
	for i := range ss {
		s := &ss[i]
		for name, b := range map[string][]byte{s.RuleFile: s.Rule, s.TestFile: s.Test} {
			p := filepath.Join(dir, name)
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return usageErrorf("--out %s: %v", dir, unwrapPath(err))
			}
			_, err = f.Write(b)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", p, err)
			}
		}
		if err := suggest.Check(ctx, suggestRego{}, dir, s); err != nil {
			return err
		}
	}
	return nil
}

// unwrapPath drops an *os.PathError's op and path: the message names the
// flag and path already.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// suggestRego is suggest's Rego toolchain, made of package policies:
// suggest writes, replays and tests Rego without linking OPA itself.
type suggestRego struct{}

func (suggestRego) Format(name string, src []byte) ([]byte, error) { return policies.Format(name, src) }

func (suggestRego) RefKey(name string) bool { return policies.RefKey(name) }

func (suggestRego) Load(ctx context.Context, p suggest.Policy, timeout time.Duration, log *slog.Logger) (replay.Decider, error) {
	e, err := policies.Load(ctx, policies.Options{Policies: p.Paths, Data: p.Data, Timeout: timeout, Logger: log})
	if err != nil {
		return nil, err // not a nil *Engine in a non-nil Decider
	}
	return e, nil
}

func (suggestRego) Test(ctx context.Context, paths []string) (passed int, failures string, err error) {
	rep, err := policies.RunTests(ctx, paths, policies.TestOptions{})
	if err != nil {
		return 0, "", err
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteText(&b, false)
		failures = b.String()
	}
	return rep.Count(policies.TestPass), failures, nil
}

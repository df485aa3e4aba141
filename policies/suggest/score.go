package suggest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies/replay"
)

// aloneMain is the main policy a suggestion is scored with on its own:
// the wiring line's effect, and everything else asks a human, as the
// recorded escalations did.
const aloneMain = `package fulfiller

default decision := {"action": "escalate"}

decision := {"action": "fulfill", "message": "suggested rule"} if data.fulfiller.suggested[_].fulfill
`

// Policy is the current policy a suggestion is scored with (--policy,
// --data), loaded as eval and run load it.
type Policy struct {
	Paths []string
	Data  []string
}

// Score is how a replay of the log scores a suggestion.
type Score struct {
	Revision string `json:"revision"` // of the policy replayed
	// FalseApprovals: proposals a human declined that the policy would
	// fulfil. Alone, a suggestion's must be 0; with the current policy,
	// the current policy's own are included.
	FalseApprovals int64 `json:"false_approvals"`
	// NeedlessAsksAvoided: proposals humans approved that the policy
	// would fulfil instead of asking (with the current policy: fewer
	// needless asks than the current policy alone).
	NeedlessAsksAvoided int64 `json:"needless_asks_avoided"`
	// AutoDecided: recorded escalations the policy would fulfil (with
	// the current policy: how many more than the current policy alone).
	AutoDecided int64 `json:"auto_decided"`
	// Errors counts evaluations that failed closed (a timeout: raise
	// --policy-timeout); the counts above are then too low.
	Errors int64 `json:"errors,omitempty"`
}

// Scores are a suggestion's replay scores.
type Scores struct {
	Alone Score `json:"alone"` // the rule by itself, everything else escalated
	// WithPolicy is the current policy with the rule beside it, when one
	// was given. A current policy that does not consult
	// data.fulfiller.suggested (the Wiring line) is unchanged by it.
	WithPolicy *Score `json:"with_policy,omitempty"`
}

// Scorer replays a decision log against suggestions.
type Scorer struct {
	rego     Rego
	open     func() (io.ReadCloser, error)
	policy   *Policy
	baseline *replay.Report
	dir      string
	timeout  time.Duration
	log      *slog.Logger
}

// NewScorer prepares to score suggestions, loading policies with rego,
// with the log open returns (it is read once per replay), each evaluation
// bounded by timeout; one that runs out fails closed and is counted in
// Score.Errors. With a current policy, the policy is loaded and the log
// replayed against it once, as the baseline: a policy that does not load
// is an error naming its file.
func NewScorer(ctx context.Context, rego Rego, open func() (io.ReadCloser, error), current *Policy, timeout time.Duration, log *slog.Logger) (*Scorer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "fulfiller-suggest-")
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	sc := &Scorer{rego: rego, open: open, policy: current, dir: dir, timeout: timeout, log: log}
	if current != nil {
		e, err := sc.load(ctx, current.Paths, true)
		if err != nil {
			sc.Close()
			return nil, err
		}
		if sc.baseline, err = sc.replay(ctx, e); err != nil {
			sc.Close()
			return nil, err
		}
	}
	return sc, nil
}

// Close removes the scratch files.
func (sc *Scorer) Close() error { return os.RemoveAll(sc.dir) }

// ScoreAll scores every suggestion of res (setting its Score) and moves
// those whose rule alone would fulfil a call a human declined to
// res.Skipped: Learn checks its pattern against the declines it kept,
// and the replay checks the Rego itself against every decline in the log.
func (sc *Scorer) ScoreAll(ctx context.Context, res *Result) error {
	kept := []Suggestion{}
	for _, s := range res.Suggestions {
		score, err := sc.Score(ctx, &s)
		if err != nil {
			return fmt.Errorf("score %s: %w", s.Name, err)
		}
		if score.Alone.FalseApprovals > 0 {
			res.Skipped = append(res.Skipped, Skipped{Proposer: s.Proposer, Tool: s.Tool, Server: s.Server,
				Approvals: s.Approvals, Declines: s.Declines,
				Reason: fmt.Sprintf("its replay fulfils %d proposals a human declined", score.Alone.FalseApprovals)})
			continue
		}
		s.Score = &score
		kept = append(kept, s)
	}
	res.Suggestions = kept
	return nil
}

// Score replays the log against s alone and, with a current policy,
// against the current policy with s beside it.
func (sc *Scorer) Score(ctx context.Context, s *Suggestion) (Scores, error) {
	dir := filepath.Join(sc.dir, s.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Scores{}, err
	}
	rule := filepath.Join(dir, s.RuleFile)
	main := filepath.Join(dir, "main.rego")
	if err := os.WriteFile(rule, s.Rule, 0o600); err != nil {
		return Scores{}, err
	}
	if err := os.WriteFile(main, []byte(aloneMain), 0o600); err != nil {
		return Scores{}, err
	}
	e, err := sc.load(ctx, []string{main, rule}, false)
	if err != nil {
		return Scores{}, fmt.Errorf("the generated rule: %w", err)
	}
	rep, err := sc.replay(ctx, e)
	if err != nil {
		return Scores{}, err
	}
	out := Scores{Alone: Score{
		Revision: rep.Revision, FalseApprovals: rep.Humans.FalseApprovals,
		NeedlessAsksAvoided: rep.Humans.Approved - rep.Humans.NeedlessAsks,
		AutoDecided:         autoDecided(rep), Errors: rep.NewErrors,
	}}
	if sc.policy == nil {
		return out, nil
	}
	e, err = sc.load(ctx, append(append([]string{}, sc.policy.Paths...), rule), true)
	if err != nil {
		return Scores{}, fmt.Errorf("the current policy with the rule: %w", err)
	}
	if rep, err = sc.replay(ctx, e); err != nil {
		return Scores{}, err
	}
	out.WithPolicy = &Score{
		Revision: rep.Revision, FalseApprovals: rep.Humans.FalseApprovals,
		NeedlessAsksAvoided: sc.baseline.Humans.NeedlessAsks - rep.Humans.NeedlessAsks,
		AutoDecided:         autoDecided(rep) - autoDecided(sc.baseline), Errors: rep.NewErrors + sc.baseline.NewErrors,
	}
	return out, nil
}

// load loads paths, with the current policy's data when withData (the
// rule alone needs none).
func (sc *Scorer) load(ctx context.Context, paths []string, withData bool) (replay.Decider, error) {
	p := Policy{Paths: paths}
	if sc.policy != nil && withData {
		p.Data = sc.policy.Data
	}
	return sc.rego.Load(ctx, p, sc.timeout, sc.log)
}

func (sc *Scorer) replay(ctx context.Context, e replay.Decider) (*replay.Report, error) {
	r, err := sc.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return replay.Replay(ctx, r, e, replay.Options{})
}

// autoDecided counts the recorded escalations the replayed policy fulfils.
func autoDecided(rep *replay.Report) int64 {
	for _, t := range rep.Transitions {
		if t.Old == decision.Escalate && t.New == decision.Fulfill {
			return t.Count
		}
	}
	return 0
}

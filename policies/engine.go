package policies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/print"
)

// DefaultTimeout bounds one evaluation when Options.Timeout is zero.
const DefaultTimeout = 100 * time.Millisecond

// Options configure an Engine.
type Options struct {
	// Policies are .rego files, directories (walked recursively;
	// *_test.rego and hidden files in them are skipped) and OPA bundles
	// (.tar.gz or .tgz, as opa build writes them; their _test.rego files
	// are skipped too). Empty, and no Remote, means the embedded default
	// policy, which rejects everything.
	Policies []string
	// Data are JSON or YAML documents merged into data. A file is merged
	// at the root; files under a directory are mounted at their
	// subdirectory's path, as opa does.
	Data []string
	// Timeout bounds each evaluation; DefaultTimeout when zero.
	Timeout time.Duration
	// Logger receives reload results and policy print() output (at debug
	// level). slog.Default() when nil.
	Logger *slog.Logger
	// Verification checks the signatures of the OPA bundles in Policies
	// and of Remote's. Nil: a signed bundle is refused and an unsigned
	// one accepted, as opa run does without --verification-key.
	Verification *BundleVerification
	// MaxBundleBytes bounds each bundle, compressed and expanded;
	// DefaultMaxBundleBytes when zero.
	MaxBundleBytes int64
	// Remote is a bundle served over HTTP(S), fetched by Load and then
	// polled by PollBundle; nil for none.
	Remote *RemoteBundle
}

func (o *Options) maxBundleBytes() int64 {
	if o.MaxBundleBytes > 0 {
		return o.MaxBundleBytes
	}
	return DefaultMaxBundleBytes
}

// ErrEvalTimeout is wrapped by the error of a decision whose evaluation ran
// out of time.
var ErrEvalTimeout = errors.New("policy evaluation timed out")

// Engine decides inputs with the currently loaded policy set. It is safe for
// concurrent use: every evaluation reads the current set through an atomic
// pointer, and reloads swap in a whole new set, so a decision never sees a
// half-loaded policy.
type Engine struct {
	opts   Options
	log    *slog.Logger
	cur    atomic.Pointer[policySet]
	cache  inputCache
	hook   print.Hook
	reload sync.Mutex // one rebuild at a time

	errMu   sync.Mutex
	lastErr error

	remote remoteState // guarded by reload, except err (errMu)

	// stall, when set (by tests), runs at the start of each evaluation
	// attempt of Decide (1, then 2 for the retry), inside its timeout: it
	// stands for a process starved of CPU.
	stall func(attempt int)

	// watchTrace, when set (by tests, before Watch starts), hears what
	// Watch does: "watching" once its watches are in place, "ignored"
	// with the name of an event that cannot change the policy set. It
	// lets a test wait for "the watcher saw this and did nothing"
	// instead of sleeping.
	watchTrace func(what, name string)
}

// Load reads and compiles the policies and data opts names. Errors name the
// file, and the line for Rego errors (see LoadError).
func Load(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Policies = slices.Clone(opts.Policies)
	opts.Data = slices.Clone(opts.Data)
	e := &Engine{opts: opts, log: opts.Logger}
	e.hook = logPrintHook{log: e.log}
	if opts.Remote != nil {
		b, notModified, err := e.fetch(ctx, "")
		if err == nil && notModified {
			err = errors.New("304 Not Modified to a request without If-None-Match")
		}
		if err != nil {
			e.observeDownload(bundleResult(err))
			return nil, &LoadError{File: opts.Remote.URL, Err: err}
		}
		e.remote.cur = b
	}
	set, err := buildSet(ctx, &e.opts, e.hook, e.remote.cur)
	if err != nil {
		if opts.Remote != nil {
			e.observeDownload(BundleRefused)
		}
		return nil, err
	}
	if opts.Remote != nil {
		e.observeDownload(BundleOK)
		e.remote.activated(e.remote.cur)
	}
	e.cur.Store(set)
	return e, nil
}

// Revision identifies the loaded policy set: by content ("sha256:…") for
// files, by the manifest's revision for a bundle, the parts joined by "+"
// when there are several (see setRevision). Each Decision carries the
// revision that made it.
func (e *Engine) Revision() string { return e.cur.Load().revision }

// Files lists the policy files, bundles (files and the Remote URL) and
// data files of the loaded set, in that order. The embedded default
// policy is not a file and is not listed.
func (e *Engine) Files() []string { return slices.Clone(e.cur.Load().files) }

// MissingData lists the data documents the loaded policies read that
// neither Options.Data, a bundle's data nor a rule of the policies
// provides ("data.settings", "data.settings.blocklist"), sorted. Such a
// read is undefined, so every rule that needs it silently never matches:
// leaving out a --data file can turn a blocklist's reject into a fulfil.
func (e *Engine) MissingData() []string { return slices.Clone(e.cur.Load().missing) }

// IsDefault reports whether the engine runs the embedded default policy.
func (e *Engine) IsDefault() bool { return e.cur.Load().isDefault }

// Timeout is the limit of one evaluation.
func (e *Engine) Timeout() time.Duration { return e.opts.Timeout }

// LastReloadError is the error of the most recent reload, or nil when it
// succeeded (or none was tried). While it is set, the previous policy set
// stays in force.
//
// With a Remote bundle it also reports the last download that failed or
// was refused, until one succeeds (or the server answers 304).
func (e *Engine) LastReloadError() error {
	e.errMu.Lock()
	defer e.errMu.Unlock()
	switch {
	case e.remote.err == nil:
		return e.lastErr
	case e.lastErr == nil:
		return e.remote.err
	}
	return errors.Join(e.lastErr, e.remote.err)
}

// Reload rebuilds the policy set from disk. The new set is compiled next to
// the running one and swapped in only when it compiles; on error the last
// good set stays in force, the error is logged and returned, and
// LastReloadError reports it.
func (e *Engine) Reload(ctx context.Context) error {
	e.reload.Lock()
	defer e.reload.Unlock()
	set, err := buildSet(ctx, &e.opts, e.hook, e.remote.cur)
	e.errMu.Lock()
	e.lastErr = err
	e.errMu.Unlock()
	old := e.cur.Load()
	if err != nil {
		attrs := []any{"error", err, "revision", old.revision}
		var le *LoadError
		if errors.As(err, &le) {
			// Every error of the load, each whole with its source line
			// and caret: "error" names only the first.
			attrs = append(attrs, "errors", le.Details())
		}
		e.log.Error("policy reload failed; the last good policy stays in force", attrs...)
		return err
	}
	e.cur.Store(set)
	if set.revision != old.revision {
		e.log.Info("policy reloaded", "revision", set.revision, "previous", old.revision, "files", len(set.files))
	}
	return nil
}

// Decide evaluates the policy for in. It never fails: anything that keeps
// the policy from producing a valid decision — no decision, a malformed
// one, a conflict or other evaluation error, a cancelled ctx — becomes a
// reject with reason "policy" whose Err says why.
//
// The timeout is not a policy verdict: an evaluation cut by it most often
// waited for a CPU on a loaded host (issue 41). It is tried once more, and
// the second decision stands (Retried); when that one is cut too, the
// answer is a reject with reason "busy" (BusyMessage), which a proposer
// may retry, whose Err wraps ErrEvalTimeout.
func (e *Engine) Decide(ctx context.Context, in *Input) Decision {
	set := e.cur.Load()
	v, err := in.value(&e.cache, set.need)
	if err != nil {
		return failClosed(set.revision, fmt.Errorf("input: %w", err))
	}
	d := e.eval(ctx, set, v, in.Now, nil, 1)
	if !errors.Is(d.Err, ErrEvalTimeout) || ctx.Err() != nil {
		return d
	}
	e.log.Warn("policy evaluation timed out; trying it once more (a loaded host is not a policy verdict)", "timeout", e.opts.Timeout)
	d = e.eval(ctx, set, v, in.Now, nil, 2)
	d.Retried = true
	if errors.Is(d.Err, ErrEvalTimeout) {
		d.Reason, d.Message = ReasonBusy, BusyMessage
		d.Err = fmt.Errorf("%w after %v, twice: answered busy, not policy (the host may be too loaded to decide in time; a policy that always takes longer needs a larger --policy-timeout)", ErrEvalTimeout, e.opts.Timeout)
	}
	return d
}

// EvaluatedInput is the input document Decide evaluates for in, as JSON:
// only the top-level fields the loaded policies can read (a field no rule
// reads cannot change a decision, so Decide does not build it). Deciding
// this document anywhere — DecideJSON, an OPA server with the same
// policies — decides as Decide does; `fulfiller bench --vs-opa-server`
// sends it to the server, so that both sides evaluate the same document.
func (e *Engine) EvaluatedInput(in *Input) ([]byte, error) {
	v, err := in.value(nil, e.cur.Load().need)
	if err != nil {
		return nil, err
	}
	return marshalValue(v)
}

// DecideDocument evaluates a complete input document as it is (see
// ParseDocument and ParseEvalInput). Like Decide it never fails. When the
// document has an RFC 3339 "now", time.now_ns() returns that time, so a
// decision replayed from a log sees the clock it saw then.
func (e *Engine) DecideDocument(ctx context.Context, doc *Document) Decision {
	return e.eval(ctx, e.cur.Load(), doc.value, doc.now(), nil, 0)
}

// DecideJSON is ParseDocument then DecideDocument: it decides a complete
// input document given as JSON, such as a decision log's "input". The
// error is ParseDocument's (input is no JSON object), and then nothing was
// decided. It lets replay decide with an Engine through its Decider
// interface, without linking OPA's types.
func (e *Engine) DecideJSON(ctx context.Context, input []byte) (Decision, error) {
	doc, err := ParseDocument(input)
	if err != nil {
		return Decision{}, err
	}
	return e.DecideDocument(ctx, doc), nil
}

// Explain decides like Decide and also records which rules fired. It traces
// the evaluation, which makes it several times slower: it is meant for
// `fulfiller eval --explain` and for decision logs that ask for it, not for
// every proposal.
func (e *Engine) Explain(ctx context.Context, in *Input) (Decision, Explanation) {
	set := e.cur.Load()
	v, err := in.value(&e.cache, set.need)
	if err != nil {
		return failClosed(set.revision, fmt.Errorf("input: %w", err)), Explanation{Rules: []FiredRule{}}
	}
	return e.explain(ctx, set, v, in.Now)
}

// ExplainDocument is Explain for a complete input document.
func (e *Engine) ExplainDocument(ctx context.Context, doc *Document) (Decision, Explanation) {
	return e.explain(ctx, e.cur.Load(), doc.value, doc.now())
}

func (e *Engine) explain(ctx context.Context, set *policySet, input ast.Value, now time.Time) (Decision, Explanation) {
	var x explainer
	d := e.eval(ctx, set, input, now, &x, 0)
	return d, x.explanation(set.missing)
}

// noMetrics is shared by every evaluation: rego would otherwise allocate a
// fresh metrics registry per call that nobody reads.
var noMetrics = metrics.NoOp()

// eval runs the prepared query once; attempt is Decide's (1, 2), else 0.
//
// Cancellation does not use a context.WithTimeout per call: rego would then
// start a goroutine per evaluation to watch it. A timer and, only when the
// caller's ctx can be cancelled, a context.AfterFunc flip OPA's Cancel
// directly, which topdown polls as it evaluates — so a runaway policy is cut
// at the timeout whatever it is doing between built-in calls.
func (e *Engine) eval(ctx context.Context, set *policySet, input ast.Value, now time.Time, x *explainer, attempt int) Decision {
	if ctx.Err() != nil {
		return failClosed(set.revision, fmt.Errorf("policy evaluation cancelled: %w", context.Cause(ctx)))
	}
	cancel := topdown.NewCancel()
	var timedOut atomic.Bool
	timer := time.AfterFunc(e.opts.Timeout, func() {
		timedOut.Store(true)
		cancel.Cancel()
	})
	defer timer.Stop()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, cancel.Cancel)
		defer stop()
	}
	if e.stall != nil && attempt > 0 {
		e.stall(attempt)
	}

	var builtinErrs []topdown.Error
	rules := getRuleCache()
	defer rules.release()
	opts := make([]rego.EvalOption, 0, 9)
	opts = append(opts,
		rego.EvalParsedInput(input),
		rego.EvalBaseCache(set.data),
		rego.EvalVirtualCache(rules),
		rego.EvalExternalCancel(cancel),
		rego.EvalMetrics(noMetrics),
		rego.EvalBuiltinErrorList(&builtinErrs),
	)
	if !now.IsZero() {
		// time.now_ns() in the policy agrees with input.now.
		opts = append(opts, rego.EvalTime(now))
	}
	if x != nil {
		// Without the rule index: it leaves out, untried, the branches
		// whose input or data it can tell will not match (a read of
		// data nobody provided among them), and the explanation promises
		// every branch of the decision that did not decide, with why.
		// The decision is the same; only the evaluation is longer.
		opts = append(opts, rego.EvalQueryTracer(x.tracer()), rego.EvalPrintHook(x), rego.EvalRuleIndexing(false))
	}

	rs, err := set.query.Eval(ctx, opts...)
	switch {
	case err != nil && timedOut.Load():
		return failClosed(set.revision, fmt.Errorf("%w after %v", ErrEvalTimeout, e.opts.Timeout))
	case err != nil && ctx.Err() != nil:
		return failClosed(set.revision, fmt.Errorf("policy evaluation cancelled: %w", context.Cause(ctx)))
	case err != nil:
		return failClosed(set.revision, fmt.Errorf("policy evaluation: %w", err))
	case len(rs) == 0 || len(rs[0].Expressions) == 0:
		if len(builtinErrs) > 0 {
			// Built-in errors make expressions undefined rather than
			// failing the query (as in opa eval); when that leaves no
			// decision, they are the likely reason, so say so.
			return failClosed(set.revision, fmt.Errorf("%w (built-in error: %v)", ErrUndefinedDecision, &builtinErrs[0]))
		}
		return failClosed(set.revision, ErrUndefinedDecision)
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return failClosed(set.revision, fmt.Errorf("unexpected result type %T", rs[0].Expressions[0].Value))
	}
	d := decide(set.revision, t.Value)
	if d.Err != nil {
		return d
	}
	if len(builtinErrs) > 0 {
		// As in opa, a failing built-in made some expression undefined
		// and the policy decided anyway. That is Rego's semantics, but
		// it usually means a rule did not see what its author expected.
		e.log.WarnContext(ctx, "built-in error during policy evaluation",
			"error", &builtinErrs[0], "action", string(d.Action), "revision", set.revision)
	}
	return d
}

// decide turns what data.fulfiller.decision evaluated to into the decision
// the sidecar acts on: the policy's own when it is well formed, else the
// fail-closed reject. It is the single place that rule lives, so the fuzz
// target exercises exactly what eval does.
func decide(revision string, v ast.Value) Decision {
	d, err := parseDecision(v)
	if err != nil {
		return failClosed(revision, err)
	}
	d.Revision = revision
	return d
}

// logPrintHook sends policy print() output to the log at debug level, so
// that a policy author can trace a running sidecar without redeploying it.
type logPrintHook struct{ log *slog.Logger }

// Print logs one print() call.
func (h logPrintHook) Print(pctx print.Context, msg string) error {
	if h.log.Enabled(pctx.Context, slog.LevelDebug) {
		h.log.DebugContext(pctx.Context, "policy print", "location", pctx.Location.String(), "message", msg)
	}
	return nil
}

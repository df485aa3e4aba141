package sidecar

import (
	"context"
	"log/slog"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
)

// The sidecar's parts that another composition root shares with `run`
// (internal/mcpserve, `fulfiller mcp`): the runner, the operations
// surface, the notifier, the policy and the watches. What they do, and
// in what order they start and stop, is what they do in the sidecar;
// these are only their handles.

// Component is one piece of a composition root (a part, as the
// sidecar's are; Part names them in a StartError), started and stopped
// by a Runner: Start starts it (ctx bounds the starting only) and leaves
// nothing running when it fails; Stop stops everything Start started
// and waits for it.
type Component interface {
	Start(ctx context.Context) error
	Stop() error
}

// Runner starts Components in the order they were added and stops them in
// reverse, as the sidecar's own are. It is used from one goroutine at a
// time.
type Runner struct{ r runner }

// NewRunner makes a Runner that logs to log.
func NewRunner(log *slog.Logger) *Runner { return &Runner{r: runner{log: log}} }

// Add appends p, to start after the parts added before it.
func (r *Runner) Add(name string, p Component) { r.r.add(name, p) }

// Start starts every part in order; when one fails, those started are
// stopped again in reverse and the error is its Start's.
func (r *Runner) Start(ctx context.Context) error { return r.r.Start(ctx) }

// Stop stops the started parts in reverse order, each once.
func (r *Runner) Stop() error { return r.r.Stop() }

// Ops is the operations surface as a Component: the decision log (reopened
// on SIGHUP) and the --http listener of /healthz, /readyz, /metrics and
// the operator API. Add it first, so that it stops last.
type Ops struct{ rt *opsRuntime }

// NewOps makes the metrics; Start opens what cfg names. keyed says
// which approvers sign, for the decision log (nil: none).
func NewOps(log *slog.Logger, cfg OpsConfig, keyed func(string) bool) *Ops {
	if keyed == nil {
		keyed = func(string) bool { return false }
	}
	return &Ops{rt: newOpsRuntime(log, cfg, keyed)}
}

// Start opens the decision log and starts the listener; a failure is a
// *StartError of PartDecisionLog or PartHTTP.
func (o *Ops) Start(ctx context.Context) error { return o.rt.Start(ctx) }

// Stop flushes and closes the decision log, then stops the listener.
func (o *Ops) Stop() error { return o.rt.Stop() }

// Observer is what fulfill.Config.Observer gets: the metrics and the
// decision log.
func (o *Ops) Observer() fulfill.Observer { return o.rt.observer() }

// ApprovalObserver is what the approvals' observer calls: the metrics
// and the decision log.
func (o *Ops) ApprovalObserver() func(elicit.Event) { return o.rt.approvalObserver() }

// Metrics are the metrics, served or not.
func (o *Ops) Metrics() *ops.Metrics { return o.rt.metrics }

// Addr is the address the listener bound ("" without one), once Start
// has returned.
func (o *Ops) Addr() string { return o.rt.addr }

// Grants is what the operations surface reads of the grants: the
// operator API's list and revoke, and /readyz's wait for the stored
// ones (*grantstore.Registry).
type Grants interface {
	ops.Grants
	ops.GrantsLoader
}

// Live are the running parts the operations surface reports on.
type Live struct {
	// Gateway is the front end's connection (/readyz, metrics).
	Gateway ops.Gateway
	// Policy is the live policy.
	Policy ops.Policy
	// Counter gives the pending and in-flight gauges; Operator the
	// operator API's pending list and cancel.
	Counter  ops.Counter
	Operator ops.Operator
	// Grants are the grants approvers made.
	Grants Grants
}

// Running makes the live parts known to /readyz, /metrics and /v1/.
func (o *Ops) Running(l Live) {
	o.rt.source.SetGrants(l.Grants)
	o.rt.running(l.Gateway, l.Policy, l.Counter, l.Operator, l.Grants)
}

// Notifier tells --notify's targets of prompts opening and ending, as a
// Component: add it before whatever asks approvers, so that it stops after
// it (the prompt.ended of the prompts cancelled at shutdown still go
// out).
type Notifier struct{ nt *notifier }

// NewNotifier is the notifier of targets, its links to inboxURL; nil
// without targets (Observer then passes events through).
func NewNotifier(targets []notify.Target, inboxURL string, metrics *ops.Metrics, log *slog.Logger) *Notifier {
	nt := newNotifier(&Config{Notify: targets, InboxURL: inboxURL}, metrics, log)
	if nt == nil {
		return nil
	}
	return &Notifier{nt: nt}
}

// Start makes the notifier and runs it until Stop.
func (n *Notifier) Start(ctx context.Context) error { return n.nt.Start(ctx) }

// Stop lets the last notifications out and waits for the workers.
func (n *Notifier) Stop() error { return n.nt.Stop() }

// Observer adds the notifier, when there is one, to next.
func (n *Notifier) Observer(next func(elicit.Event)) func(elicit.Event) {
	if n == nil {
		return next
	}
	return n.nt.observer(next)
}

// Policy loads the live policy and the tool metadata as a Component, and
// makes the policy and the approver keys known to the operations
// surface; their hot reloads are Watches'.
type Policy struct{ p *policyPart }

// NewPolicy is the policy part of opts, toolMetadata ("": none) and
// keys (nil: none), reported to o.
func NewPolicy(opts policies.Options, toolMetadata string, keys *approverkeys.Watcher, o *Ops, log *slog.Logger) *Policy {
	return &Policy{p: &policyPart{cfg: &Config{Policy: opts, ToolMetadata: toolMetadata, Keys: keys}, log: log, ops: o.rt}}
}

// Start loads them; a failure is a *StartError of PartPolicy or
// PartToolMetadata.
func (p *Policy) Start(ctx context.Context) error { return p.p.Start(ctx) }

// Stop has nothing to stop.
func (p *Policy) Stop() error { return p.p.Stop() }

// Engine is the live policy, once Start has returned.
func (p *Policy) Engine() *policies.Engine { return p.p.engine }

// ToolMetadata is fulfill.Config.ToolMetadata: nil without a file.
func (p *Policy) ToolMetadata() fulfill.ToolMetadata { return p.p.toolMetadata() }

// NewWatches is the Component that keeps what the lifecycle reads fresh, as
// run's: the policy's and the tool metadata's hot reload, the approver
// keys' (keys nil: none), and grants (the grants' expiry and following
// of the store, read at Start). Add it just before the lifecycle.
func NewWatches(log *slog.Logger, p *Policy, keys *approverkeys.Watcher, grants func(context.Context) error) Component {
	return &watches{log: log, policy: p.p, keys: keys, grants: grants}
}

// DecisionLog is the decision log (nil without one), once Start has
// returned: for a root that observes with it alone, without the
// metrics.
func (o *Ops) DecisionLog() *decisionlog.Logger { return o.rt.dlog }

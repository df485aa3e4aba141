package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/internal/ops"
)

// clientPart is the participant in the space: the join, after the
// answers an earlier process left in the store are restored to its
// outbox, and the leave.
type clientPart struct {
	cfg   *Config
	log   *slog.Logger
	store *storePart // nil without Config.State

	client *agent.Client
	// sub is what the fulfiller reads: every frame (answers to prompts
	// included).
	sub *agent.Subscription
}

// Start joins; a failure is a *StartError of PartState (the outbox) or
// PartJoin.
func (p *clientPart) Start(ctx context.Context) error {
	cfg, log, store := p.cfg, p.log, p.store.get()
	maxAge := cfg.Fulfill.PendingTTL
	if maxAge <= 0 {
		maxAge = 10 * time.Minute // fulfill.Config's default
	}
	out, err := restoreOutbox(ctx, log, store, maxAge)
	if err != nil {
		return &StartError{Part: PartState, Err: err}
	}
	// Subscribed from the join on (DialSubscribed): a proposal sent the
	// moment the fulfiller appears in the roster would otherwise arrive
	// before Subscribe and never be answered. It sees every frame (All):
	// in a group an approver answers the member that asked, and when
	// that member's work was adopted, the adopter must hear the answer
	// too.
	client, subs, err := agent.DialSubscribed(ctx, agent.Config{
		URL: cfg.Gateway, Space: cfg.Space, Token: cfg.Token, ID: cfg.ID,
		MaxFrame: cfg.MaxFrame, JoinTimeout: cfg.JoinTimeout, Logger: log,
		RPCIDs: rpcIDSource(store), Outbox: out,
	}, agent.SubscribeOptions{All: true, Buffer: 1024, Impersonations: true})
	if err != nil {
		return &StartError{Part: PartJoin, Err: fmt.Errorf("join %s as %s: %w", cfg.Gateway, cfg.ID, err)}
	}
	p.client, p.sub = client, subs[0]
	// The agent's "joined space" line (gateway, id, the capabilities
	// granted and who else is there) is the one line a join logs.
	if why := ops.CannotAnswer(client.Capabilities()); why != "" {
		log.Error("fulfiller cannot answer proposals; /readyz reports not ready until the gateway grants more", "reason", why)
	}
	return nil
}

// Stop leaves the space; cancellations still waiting for a session are
// lost (the account counts them).
func (p *clientPart) Stop() error {
	_ = p.client.Close()
	p.sub.Close()
	return nil
}

// approvalsPart is the fulfiller's channel to the approvers: the core
// asks the humans (its escalation), elicit is the codec of its prompts
// and answers, and the approvals' observers (operations, notifier, the
// sidecar's own) hear each step. It runs nothing of its own.
type approvalsPart struct {
	cfg      *Config
	log      *slog.Logger
	ops      *opsRuntime
	notifier *notifier // nil without targets
	client   *clientPart

	approvals *fulfill.Approvals
}

func (p *approvalsPart) Start(context.Context) error {
	cfg := p.cfg
	approvalObs := p.notifier.observer(p.ops.approvalObserver())
	if extra := cfg.ApprovalObserver; extra != nil {
		next := approvalObs
		approvalObs = func(e elicit.Event) { next(e); extra(e) }
	}
	ecfg := elicit.Config{DefaultApprovers: cfg.Approvers, Logger: p.log}
	if cfg.Keys != nil {
		ecfg.CurrentKeys = cfg.Keys.Keys
	}
	elicit.LogKeys(ecfg)
	// Grants are offered wherever the policy's decision is grantable: the
	// policy, not a flag, decides whether people may grant.
	p.approvals = &fulfill.Approvals{Codec: elicit.Codec{Signer: p.client.client.ID(), PromptKey: cfg.PromptKey, Logger: p.log}, OfferGrants: true,
		Observer: func(h lifecycle.Human) { approvalObs(elicit.EventOf(h)) }}
	if cfg.Keys != nil {
		keys := cfg.Keys
		p.approvals.CurrentKeys = func() lifecycle.KeySet { return keys.Keys() }
	}
	return nil
}

// Stop has nothing to stop: the fulfiller, stopped before, cancelled
// every prompt still open.
func (p *approvalsPart) Stop() error { return nil }

// grantsPart is the registry of the grants approvers make, kept in the
// store and mirrored in memory. It runs nothing: its expiry and its
// following of the store are a watch.
type grantsPart struct {
	cfg   *Config
	log   *slog.Logger
	ops   *opsRuntime
	store *storePart // nil without Config.State

	reg *grantstore.Registry
}

func (p *grantsPart) Start(context.Context) error {
	reg := grantstore.NewRegistry(grantStore(p.store.get()), p.log)
	reg.GatewayAuthenticatesFrom(p.cfg.GatewayAuthenticatesFrom)
	reg.OnExpire(func(grants.Grant) { p.ops.metrics.GrantExpired() })
	p.reg = reg
	p.ops.source.SetGrants(reg)
	return nil
}

func (p *grantsPart) Stop() error { return nil }

// fulfillerPart is the proposal lifecycle, the last part: it answers
// from its Start on, until its Stop, which stops it taking proposals and
// answers every pending one (within Fulfill.ShutdownTimeout) while the
// client is still joined.
type fulfillerPart struct {
	cfg       *Config
	log       *slog.Logger
	ops       *opsRuntime
	policy    *policyPart
	store     *storePart // nil without Config.State
	client    *clientPart
	approvals *approvalsPart
	grants    *grantsPart

	ful     *fulfill.Fulfiller
	runErr  error         // Run's, once done is closed
	done    chan struct{} // closed when Run has returned, or when Start failed before it
	running tasks         // its Run
}

func (p *fulfillerPart) Start(ctx context.Context) error {
	cfg := p.cfg
	fcfg := cfg.Fulfill
	fcfg.SpaceID = cfg.Space
	fcfg.Approvals = p.approvals.approvals
	fcfg.Observer = p.ops.observer()
	if cfg.Observer != nil {
		fcfg.Observer = fulfill.Observers{fcfg.Observer, cfg.Observer}
	}
	fcfg.Logger = p.log
	fcfg.Store = fulfillStore(p.store.get())
	fcfg.Grants = p.grants.reg
	fcfg.Shadow = p.policy.shadowDecider()
	fcfg.ShadowTimeout = cfg.Policy.Timeout
	fcfg.ToolMetadata = p.policy.toolMetadata()
	if fcfg.Approvers == nil {
		fcfg.Approvers = cfg.Approvers
	}
	p.ful = fulfill.New(p.client.client, p.policy.engine, fcfg)
	p.ops.running(p.client.client, p.policy.engine, p.ful, p.ful, p.grants.reg)
	in := p.client.sub.C()
	p.running.goRun(ctx, func(ctx context.Context) {
		defer close(p.done)
		p.runErr = p.ful.Run(ctx, in)
	})
	return nil
}

func (p *fulfillerPart) Stop() error {
	p.running.stop()
	return nil
}

// shutdownAccount is the part that says, once the fulfiller and the
// client have stopped, how the answers owed at shutdown went: it starts
// just before the client so that it stops just after it (cancellations
// that waited for a session are lost when the client closes). Its Stop
// returns what the sidecar's does: a *ShutdownError when answers were
// lost or cancellations not sent, else the fulfiller's error.
type shutdownAccount struct {
	log    *slog.Logger
	client *clientPart
	ful    *fulfillerPart
}

func (a *shutdownAccount) Start(context.Context) error { return nil }

func (a *shutdownAccount) Stop() error {
	ful := a.ful.ful
	if ful == nil { // the join failed
		return nil
	}
	<-a.ful.done
	log := a.log
	owed, lost := ful.ShutdownAnswers()
	kept := ful.ShutdownKept()
	unsent := a.client.client.Queued()
	if lost > 0 || unsent > 0 {
		msg := fmt.Sprintf("stopped; %d of %d answers were not delivered and %d cancellations were not sent", lost, owed, unsent)
		if kept > 0 {
			msg = fmt.Sprintf("stopped; %d answers could not be written and are kept in the state store, to be sent after a restart on it; %d of %d answers were lost and %d cancellations were not sent", kept, lost, owed, unsent)
		}
		log.Error(msg, "undelivered", lost, "kept", kept, "answers", owed, "cancellations_unsent", unsent)
		return &ShutdownError{Owed: owed, Lost: lost, Kept: kept, Unsent: unsent, msg: msg}
	}
	if a.ful.runErr != nil {
		return a.ful.runErr
	}
	if kept > 0 {
		// Not lost: the next run on this store sends them (docs/operations.md).
		log.Warn(fmt.Sprintf("stopped; %d of %d answers could not be written and are kept in the state store, to be sent after a restart on it", kept, owed), "kept", kept, "answers", owed)
		return nil
	}
	log.Info("stopped; every pending proposal was answered", "answers", owed)
	return nil
}

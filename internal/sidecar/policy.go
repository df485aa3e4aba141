package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// policyPart loads the live policy, its shadow and the tool metadata,
// and makes the policy and the approver keys known to the operations
// surface. It runs nothing: their hot reloads are watches.
type policyPart struct {
	cfg *Config
	log *slog.Logger
	ops *opsRuntime

	engine *policies.Engine
	shadow *policies.Engine  // nil without Config.Shadow
	meta   *toolmeta.Watcher // nil without Config.ToolMetadata
}

// Start loads them; a failure is a *StartError of PartPolicy, PartShadow
// or PartToolMetadata.
func (p *policyPart) Start(ctx context.Context) error {
	cfg, log := p.cfg, p.log
	popts := cfg.Policy
	if popts.Logger == nil {
		popts.Logger = log
	}
	if r := popts.Remote; r != nil && r.Observer == nil {
		remote := *r
		remote.Observer = p.ops.metrics
		popts.Remote = &remote
	}
	engine, err := LoadPolicy(ctx, popts, log)
	if err != nil {
		return &StartError{Part: PartPolicy, Err: err}
	}
	p.engine = engine
	log.Info("policy loaded", "revision", engine.Revision(), "files", len(engine.Files()))
	if cfg.Shadow != nil {
		sopts := *cfg.Shadow
		if sopts.Logger == nil {
			sopts.Logger = log.With("policy", "shadow")
		}
		shadow, err := policies.Load(ctx, sopts)
		if err != nil {
			return &StartError{Part: PartShadow, Err: err}
		}
		p.shadow = shadow
		log.Info("shadow policy loaded; it is logged and counted, never acted on", "revision", shadow.Revision(), "files", len(shadow.Files()))
	}
	p.ops.source.SetPolicy(engine)
	if cfg.Keys != nil {
		p.ops.source.SetApproverKeys(cfg.Keys)
	}
	if cfg.ToolMetadata != "" {
		meta, err := toolmeta.Open(cfg.ToolMetadata, toolmeta.Options{Logger: log})
		if err != nil {
			return &StartError{Part: PartToolMetadata, Err: err}
		}
		p.meta = meta
		log.Info("tool metadata loaded", "file", cfg.ToolMetadata, "entries", meta.Metadata().Len())
	}
	return nil
}

// Stop has nothing to stop: what was loaded is left to the collector.
func (p *policyPart) Stop() error { return nil }

// shadowDecider is fulfill.Config.Shadow: nil without a shadow, never a
// typed nil.
func (p *policyPart) shadowDecider() fulfill.Decider {
	if p.shadow == nil {
		return nil
	}
	return p.shadow
}

// toolMetadata is fulfill.Config.ToolMetadata: nil without a file, never
// a typed nil.
func (p *policyPart) toolMetadata() fulfill.ToolMetadata {
	if p.meta == nil {
		return nil
	}
	return p.meta
}

// watches is the part that keeps what the fulfiller reads fresh: the
// policy's hot reload, the remote bundle's polling, the grants' expiry
// and following, the tool metadata's, the approver keys' and the
// shadow's hot reload, one goroutine each. Each reload keeps the last
// good version when a change is broken (logged). They start just before
// the fulfiller and stop just after it.
type watches struct {
	log    *slog.Logger
	policy *policyPart
	keys   *approverkeys.Watcher // nil without Config.Keys
	// grants is the grants' expiry and following of the store
	// (grantstore.Registry.Run), read at Start: the registry is made by
	// a part started before.
	grants  func(context.Context) error
	running tasks
}

func (w *watches) Start(ctx context.Context) error {
	w.watch(ctx, "policy", w.policy.engine.Watch)
	w.watch(ctx, "", w.policy.engine.PollBundle) // a remote bundle's downloads are logged and counted by the engine
	w.watch(ctx, "", w.grants)
	if w.policy.meta != nil {
		w.watch(ctx, "tool metadata", w.policy.meta.Watch)
	}
	if w.keys != nil {
		w.watch(ctx, "approver keys", w.keys.Watch)
	}
	if w.policy.shadow != nil {
		w.watch(ctx, "shadow policy", w.policy.shadow.Watch)
	}
	return nil
}

// watch runs f until Stop; when it ends earlier by an error, the log says
// what no longer reloads (what "": nothing to say).
func (w *watches) watch(ctx context.Context, what string, f func(context.Context) error) {
	w.running.goRun(ctx, func(ctx context.Context) {
		if err := f(ctx); err != nil && what != "" && !errors.Is(err, context.Canceled) {
			w.log.Error(what+" watch stopped; "+hotReloadOff(what), "err", err)
		}
	})
}

func (w *watches) Stop() error {
	w.running.stop()
	return nil
}

// hotReloadOff is the end of the log line of a watch that stopped.
func hotReloadOff(what string) string {
	if what == "policy" {
		return "hot reload is off"
	}
	return "its hot reload is off"
}

// LoadPolicy loads the live policy as the sidecar does (and `run
// --check`, which must fail exactly when run would), warning when it is
// the built-in one, which rejects everything, or when it reads data no
// document provides.
func LoadPolicy(ctx context.Context, opts policies.Options, log *slog.Logger) (*policies.Engine, error) {
	engine, err := policies.Load(ctx, opts)
	if err != nil {
		return nil, err
	}
	if engine.IsDefault() {
		log.Warn("no --policy given: the built-in policy rejects every proposal")
	}
	if missing := engine.MissingData(); len(missing) > 0 {
		log.Warn(fmt.Sprintf("the policies read %s, which no --data provides: such a read is undefined, so the rules that need it never match", strings.Join(missing, ", ")))
	}
	return engine, nil
}

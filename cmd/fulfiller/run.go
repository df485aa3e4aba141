package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/approval"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/grants"
	"github.com/mewkit/fulfiller/grantstore"
	"github.com/mewkit/fulfiller/ops"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/toolmeta"
)

type runFlags struct {
	gateway, space, token, id string
	tokenFile                 string
	cmd                       *cobra.Command // for warnConfig
	policies, data            []string
	shadowPolicies            []string
	shadowData                []string
	approvers                 []string
	approverKeys              string
	promptKey                 string
	maxPending, maxInflight   int
	pendingTTL                time.Duration
	fulfillTimeout            time.Duration
	taskTimeout               time.Duration
	statusChats               bool
	ownerRejoinGrace          time.Duration
	approvalTimeout           time.Duration
	policyTimeout             time.Duration
	joinTimeout               time.Duration
	shutdownTimeout           time.Duration
	maxFrame                  sizeValue
	logFormat, logLevel       string
	ops                       opsFlags
	check                     bool
	maxPendingBytes           sizeValue
	memoryLimit               sizeValue
	maxPendingPerProposer     int
	maxInflightPerProposer    int
	peerFulfillers            []string
	state                     stateFlags
	bundle                    bundleFlags
	toolMetadata              string
	gatewayAuthenticatesFrom  bool
	notify                    notifyFlags
}

func newRunCmd() *cobra.Command {
	fl := runFlags{maxFrame: 1 << 20, maxPendingBytes: defaultMaxPendingBytes, memoryLimit: defaultMemoryLimit}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Join a MEW space and decide every proposal (the sidecar)",
		Long: `run joins the space at --gateway as --id and decides every mcp/proposal with
the Rego policies in --policy: fulfil it on the proposer's behalf, reject it
with a reason, or escalate it. Without --policy every proposal is rejected.

SIGINT or SIGTERM: stop taking proposals, answer every pending one (reject
"other"), cancel running calls at their tool owners, leave the space, exit 0.
When the gateway cannot be reached within --shutdown-timeout, the rejects
are kept in the --state store and sent by the next run on it (with --state
memory they are given up); cancellations are given up: the log says how
many, and the exit code is 1.`,
		Example: runExamples,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl.cmd = cmd
			return runSidecar(cmd.Context(), fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.gateway, "gateway", "", "gateway WebSocket URL, ws://host:port[/path] (required)")
	f.StringVar(&fl.space, "space", "", "space id sent in the join frame (default: the gateway's configured space)")
	f.StringVar(&fl.token, "token", "", "participant token (prefer FULFILLER_TOKEN or --token-file; never logged)")
	f.StringVar(&fl.tokenFile, "token-file", "", "read the participant token from `FILE` (read once at start, trimmed; mode 0600)")
	f.StringVar(&fl.id, "id", "fulfiller", "participant id to join as")
	f.StringArrayVar(&fl.policies, "policy", nil, "Rego policy file or directory (repeatable)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document for the policies (repeatable)")
	f.StringArrayVar(&fl.shadowPolicies, "shadow-policy", nil, "Rego policy file or directory of a shadow policy (repeatable): asked about every decision beside --policy, logged and counted, never acted on")
	f.StringArrayVar(&fl.shadowData, "shadow-data", nil, "JSON or YAML data document for the shadow policy (repeatable; default: the --data documents)")
	f.StringVar(&fl.toolMetadata, "tool-metadata", "", "`FILE` (YAML or JSON) of tool annotations the operator declares per tool owner and tool name or pattern, laid over what the owners send (bridged tools send none); hot-reloaded")
	f.IntVar(&fl.maxPending, "max-pending", 1000, "proposals that may wait at once; more are rejected busy")
	f.DurationVar(&fl.pendingTTL, "pending-ttl", 10*time.Minute, "longest a proposal may wait before it is rejected timeout")
	f.IntVar(&fl.maxInflight, "max-inflight", 64, "fulfilment requests outstanding at once; more wait in the queue")
	f.DurationVar(&fl.fulfillTimeout, "fulfill-timeout", 30*time.Second, "wait for the tool owner's answer before cancelling and rejecting timeout")
	f.DurationVar(&fl.taskTimeout, "task-timeout", time.Hour, "longest an MCP task (a task-augmented tool call) may run once its owner created it, when the decision sets no task_timeout; then tasks/cancel and reject timeout")
	f.BoolVar(&fl.statusChats, "status-chats", true, "tell proposers in a chat (with a machine-readable _meta) when their proposal waits for humans, for a fulfilment slot, or on a task")
	f.DurationVar(&fl.ownerRejoinGrace, "owner-rejoin-grace", 5*time.Second, "how long a tool owner that left mid-fulfilment may take to come back (a dropped link looks like a leave) before the proposal is rejected incapable")
	f.DurationVar(&fl.approvalTimeout, "approval-timeout", 5*time.Minute, "a human's deadline when the policy sets none")
	f.StringSliceVar(&fl.approvers, "approvers", nil, "approvers asked when an escalating policy names none (comma-separated participant ids)")
	f.StringVar(&fl.approverKeys, "approver-keys", "", "`FILE` of \"<approver id> <base64url Ed25519 public key>\" or \"<approver id> webauthn <credential>\" lines: those approvers' answers count only when signed")
	f.StringVar(&fl.promptKey, "prompt-key", "", "private key `FILE` (fulfiller keys generate --prompt) that signs every approval prompt; approvers pin its public key with approve --fulfiller-keys")
	f.DurationVar(&fl.policyTimeout, "policy-timeout", 100*time.Millisecond, "longest one policy evaluation may take (then: reject policy)")
	f.DurationVar(&fl.joinTimeout, "join-timeout", 10*time.Second, "wait for the gateway's welcome")
	f.DurationVar(&fl.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long to wait for a session to deliver the pending proposals' answers (then: the rejects stay in the --state store for the next run, the rest is lost: exit 1, naming how many)")
	f.Var(&fl.maxFrame, "max-frame", "read limit per frame, bytes or with a unit (512KiB, 1MiB); bigger frames are discarded")
	f.Var(&fl.maxPendingBytes, "max-pending-bytes", "frame bytes the pending proposals may hold at once, bytes or with a unit (16MiB); more are rejected busy. Each pending byte costs about 15 in memory (its copies: decoded, policy input, prompts, store): docs/limits.md")
	f.Var(&fl.memoryLimit, "memory-limit", "soft limit of the Go runtime's memory (debug.SetMemoryLimit), bytes or with a unit; 0: none. GOMEMLIMIT, when set, wins")
	f.IntVar(&fl.maxPendingPerProposer, "max-pending-per-proposer", 0, "proposals one proposer may have pending at once; more are rejected busy (0: a quarter of --max-pending)")
	f.IntVar(&fl.maxInflightPerProposer, "max-inflight-per-proposer", 0, "fulfilment requests one proposer may have outstanding at once; more wait their turn (0: a quarter of --max-inflight)")
	f.BoolVar(&fl.gatewayAuthenticatesFrom, "gateway-authenticates-from", false, "state that the gateway authenticates senders (a participant cannot post in another's name), so a grant may be pinned to a proposer; without it grants are for anyone who may propose, and grants pinned to a proposer match nothing")
	f.StringSliceVar(&fl.peerFulfillers, "peer-fulfillers", nil, "the other fulfillers of the space (comma-separated participant ids): their rejects and fulfilments are expected; any other participant able to end proposals is warned about")
	fl.ops.register(f)
	fl.state.register(f)
	fl.bundle.registerVerification(f)
	fl.bundle.registerRemote(f)
	fl.notify.register(f)
	f.BoolVar(&fl.check, "check", false, "validate everything run would open or parse (flags, config, token files, approver keys, decision log, --http address, policies, data and tool metadata), then exit without joining (0: all good, 2: what is wrong)")
	f.StringVar(&fl.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&fl.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

func (fl *runFlags) validate() error {
	if fl.gateway == "" {
		return usageErrorf("--gateway is required (ws://host:port of the MEW gateway)")
	}
	u, err := url.Parse(fl.gateway)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return usageErrorf("--gateway %q: want ws://host:port or wss://host:port", fl.gateway)
	}
	if fl.id == "" {
		return usageErrorf("--id must not be empty")
	}
	if err := fl.ops.validate(); err != nil {
		return err
	}
	if _, err := fl.state.mode(); err != nil {
		return err
	}
	if err := fl.bundle.validate(); err != nil {
		return err
	}
	for name, v := range map[string]int{"--max-pending": fl.maxPending, "--max-inflight": fl.maxInflight} {
		if v < 1 {
			return usageErrorf("%s %d: must be at least 1", name, v)
		}
	}
	if len(fl.shadowData) > 0 && len(fl.shadowPolicies) == 0 {
		return usageErrorf("--shadow-data needs --shadow-policy")
	}
	if fl.maxInflightPerProposer < 0 {
		return usageErrorf("--max-inflight-per-proposer %d: must be 0 (a quarter of --max-inflight) or more", fl.maxInflightPerProposer)
	}
	if fl.maxPendingPerProposer < 0 {
		return usageErrorf("--max-pending-per-proposer %d: must be 0 (a quarter of --max-pending) or more", fl.maxPendingPerProposer)
	}
	if fl.memoryLimit < 0 {
		return usageErrorf("--memory-limit %s: must be 0 (none) or more", &fl.memoryLimit)
	}
	if fl.maxPendingBytes < 1 {
		return usageErrorf("--max-pending-bytes %s: must be positive", &fl.maxPendingBytes)
	}
	for name, v := range map[string]time.Duration{"--pending-ttl": fl.pendingTTL, "--fulfill-timeout": fl.fulfillTimeout, "--task-timeout": fl.taskTimeout, "--owner-rejoin-grace": fl.ownerRejoinGrace,
		"--approval-timeout": fl.approvalTimeout, "--policy-timeout": fl.policyTimeout, "--join-timeout": fl.joinTimeout, "--shutdown-timeout": fl.shutdownTimeout} {
		if v <= 0 {
			return usageErrorf("%s %s: must be positive", name, v)
		}
	}
	return nil
}

// loadPolicy loads --policy, --data and --bundle-url as run and --check
// do, warning when no policy is given: the built-in one rejects
// everything. obs (nil for none) hears of the bundle downloads.
func (fl *runFlags) loadPolicy(ctx context.Context, log *slog.Logger, obs policies.BundleObserver) (*policies.Engine, error) {
	opts := policies.Options{Policies: fl.policies, Data: fl.data, Timeout: fl.policyTimeout, Logger: log}
	if err := fl.bundle.options(log, &opts, obs); err != nil {
		return nil, err
	}
	engine, err := policies.Load(ctx, opts)
	if err != nil {
		return nil, loadFlagError(err, flagPaths{"--policy", fl.policies}, flagPaths{"--data", fl.data})
	}
	if engine.IsDefault() {
		log.Warn("no --policy given: the built-in policy rejects every proposal")
	}
	if missing := engine.MissingData(); len(missing) > 0 {
		log.Warn(fmt.Sprintf("the policies read %s, which no --data provides: such a read is undefined, so the rules that need it never match", strings.Join(missing, ", ")))
	}
	return engine, nil
}

// loadToolMetadata loads --tool-metadata, or returns nil when none is
// given. A file that does not validate is a usage error naming the file,
// line and key, at start as in --check.
func (fl *runFlags) loadToolMetadata(log *slog.Logger) (*toolmeta.Watcher, error) {
	if fl.toolMetadata == "" {
		return nil, nil
	}
	meta, err := toolmeta.Open(fl.toolMetadata, toolmeta.Options{Logger: log})
	if err != nil {
		return nil, usageErrorf("--tool-metadata %w", err)
	}
	return meta, nil
}

// loadShadow loads --shadow-policy and --shadow-data (default: --data),
// or returns nil when no shadow policy is given. A broken shadow policy
// is a usage error like a broken --policy: a shadow meant to be watched
// must not silently be missing.
func (fl *runFlags) loadShadow(ctx context.Context, log *slog.Logger) (*policies.Engine, error) {
	if len(fl.shadowPolicies) == 0 {
		return nil, nil
	}
	data := fl.shadowData
	if len(data) == 0 {
		data = fl.data
	}
	opts := policies.Options{Policies: fl.shadowPolicies, Data: data, Timeout: fl.policyTimeout, Logger: log.With("policy", "shadow")}
	if err := fl.bundle.local(&opts); err != nil { // --bundle-url is the live policy's
		return nil, err
	}
	engine, err := policies.Load(ctx, opts)
	if err != nil {
		return nil, usageErrorf("--shadow-policy: %w", err)
	}
	return engine, nil
}

func runSidecar(ctx context.Context, fl runFlags) error {
	if err := fl.validate(); err != nil {
		return err
	}
	logOut := io.Writer(os.Stderr)
	if fl.cmd != nil {
		logOut = fl.cmd.ErrOrStderr()
	}
	log, err := newLogger(logOut, fl.logFormat, fl.logLevel)
	if err != nil {
		return err
	}
	// Everything below up to the join is shared with --check: each step
	// opens or parses with the function run itself uses, so --check fails
	// exactly when run would.
	if fl.cmd != nil {
		warnConfig(log, fl.cmd, joinToken, httpToken)
	}
	if !fl.check {
		applyMemoryLimit(log, int64(fl.memoryLimit))
	}
	token, err := joinToken.resolve(log, fl.token, fl.tokenFile)
	if err != nil {
		return err
	}
	if token == "" {
		return errNoToken
	}
	var keys approval.ApproverKeys
	if fl.approverKeys != "" {
		if keys, err = approval.LoadApproverKeys(fl.approverKeys); err != nil {
			return fileError("--approver-keys", err)
		}
	}
	// docs/design.md "Proposer identity and grants": signed prompts.
	promptKey, err := loadPromptKey(fl.promptKey)
	if err != nil {
		return err
	}
	if fl.check {
		if err := fl.ops.check(log); err != nil {
			return err
		}
		if _, err := fl.state.check(log); err != nil {
			return err
		}
		engine, err := fl.loadPolicy(ctx, log, nil)
		if err != nil {
			return err
		}
		if _, err := fl.loadShadow(ctx, log); err != nil {
			return err
		}
		meta, err := fl.loadToolMetadata(log)
		if err != nil {
			return err
		}
		if _, err := fl.notify.prepare(log, fl.flagSet()); err != nil {
			return err
		}
		log.Info("configuration is valid", "revision", engine.Revision(), "files", len(engine.Files()), "approver_keys", len(keys.IDs()), "tool_metadata_entries", meta.Metadata().Len())
		return nil
	}
	logPromptKey(log, fl.id, promptKey)
	// The operations surface starts first, so that probes answer (503)
	// while the policy loads and the agent joins.
	opsRT, err := fl.ops.start(log, keys)
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after fulfill.Run has returned
	// and the elicitor has stopped, flush the decision log, then stop
	// the HTTP server.
	defer opsRT.close()
	// Before the join, so that a bad --notify stops run before it
	// answers anything; deferred before the elicitor's stop, so it runs
	// after it: the prompt.ended of the prompts cancelled at shutdown
	// still go out.
	notifier, err := fl.notify.start(log, fl.flagSet(), fl.space, opsRT.metrics)
	if err != nil {
		return err
	}
	defer notifier.close()
	engine, err := fl.loadPolicy(ctx, log, opsRT.metrics)
	if err != nil {
		return err
	}
	log.Info("policy loaded", "revision", engine.Revision(), "files", len(engine.Files()))
	shadow, err := fl.loadShadow(ctx, log)
	if err != nil {
		return err
	}
	var shadowDecider fulfill.Decider // a nil *Engine in it would not be nil
	if shadow != nil {
		log.Info("shadow policy loaded; it is logged and counted, never acted on", "revision", shadow.Revision(), "files", len(shadow.Files()))
		shadowDecider = shadow
	}
	opsRT.source.SetPolicy(engine)
	meta, err := fl.loadToolMetadata(log)
	if err != nil {
		return err
	}
	var toolMetadata fulfill.ToolMetadata // a nil *Watcher in it would not be nil
	if meta != nil {
		log.Info("tool metadata loaded", "file", fl.toolMetadata, "entries", meta.Metadata().Len())
		toolMetadata = meta
	}
	// The store opens before the join: nothing is decided without
	// somewhere to keep it. Its lease outlives ctx (SIGTERM) so that peers
	// do not adopt work this process is still answering; Close, deferred
	// to run after the fulfiller and the client stopped, ends it.
	store, err := fl.state.open(ctx, log, storeConfig{member: fl.id, space: fl.space, maxPending: fl.maxPending, observer: opsRT.metrics})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	defer closeStore(log, store)
	defer probeStore(opsRT.source, store, fl.state.spec)()
	out, err := restoreOutbox(ctx, log, store, fl.pendingTTL)
	if err != nil {
		return fmt.Errorf("--state %s: %w", fl.state.spec, err)
	}

	// Subscribed from the join on (DialSubscribed): a proposal sent the
	// moment the fulfiller appears in the roster would otherwise arrive
	// before Subscribe and never be answered. The second subscription is
	// the elicitor's: in a group an approver answers the member that
	// asked, and when that member's work was adopted, the adopter must
	// hear the answer too.
	client, subs, err := agent.DialSubscribed(ctx, agent.Config{
		URL: fl.gateway, Space: fl.space, Token: token, ID: fl.id,
		MaxFrame: int64(fl.maxFrame), JoinTimeout: fl.joinTimeout, Logger: log,
		RPCIDs: rpcIDSource(store), Outbox: out,
	}, agent.SubscribeOptions{All: true, Buffer: 1024, Impersonations: true}, agent.SubscribeOptions{Kinds: elicit.Kinds, Buffer: 256, All: store != nil})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return fmt.Errorf("join %s as %s: %w", fl.gateway, fl.id, err)
	}
	defer client.Close()
	// The agent's "joined space" line (gateway, id, the capabilities
	// granted and who else is there) is the one line a join logs.
	if why := ops.CannotAnswer(client.Capabilities()); why != "" {
		log.Error("fulfiller cannot answer proposals; /readyz reports not ready until the gateway grants more", "reason", why)
	}

	sub, answers := subs[0], subs[1]
	defer sub.Close()
	// Grants are offered wherever the policy's decision is grantable: the
	// policy, not a flag, decides whether people may grant.
	elicitor := elicit.New(client, elicit.Config{DefaultApprovers: fl.approvers, Keys: keys.Ed25519, Passkeys: keys.Passkeys, PromptKey: promptKey, OfferGrants: true, Logger: log, Observer: notifier.observer(opsRT.approvalObserver())})
	elicitCtx, stopElicit := context.WithCancel(context.WithoutCancel(ctx))
	elicitDone := make(chan struct{})
	go func() { defer close(elicitDone); _ = elicitor.Run(elicitCtx, answers.C()) }()
	stopElicitor := sync.OnceFunc(func() {
		// After the fulfiller has answered everything: its Cancels have
		// told the approvers already.
		elicitor.Close()
		stopElicit()
		<-elicitDone
		answers.Close()
	})
	defer stopElicitor()
	// Grants approvers make live in the store, mirrored in memory (the
	// registry's watch is stopped with the policy watches, below).
	grantReg := grantstore.NewRegistry(grantStore(store), log)
	grantReg.GatewayAuthenticatesFrom(fl.gatewayAuthenticatesFrom)
	grantReg.OnExpire(func(grants.Grant) { opsRT.metrics.GrantExpired() })
	ful := fulfill.New(client, engine, fulfill.Config{
		SpaceID:          fl.space,
		MaxPending:       fl.maxPending,
		PendingTTL:       fl.pendingTTL,
		MaxInflight:      fl.maxInflight,
		FulfillTimeout:   fl.fulfillTimeout,
		TaskTimeout:      fl.taskTimeout,
		StatusChats:      fl.statusChats,
		OwnerRejoinGrace: fl.ownerRejoinGrace,
		ApprovalTimeout:  fl.approvalTimeout,
		ShutdownTimeout:  fl.shutdownTimeout,
		Escalator:        elicitor,
		Observer:         opsRT.observer(),
		Logger:           log,

		MaxPendingBytes:        int64(fl.maxPendingBytes),
		MaxPendingPerProposer:  fl.maxPendingPerProposer,
		MaxInflightPerProposer: fl.maxInflightPerProposer,
		PeerFulfillers:         fl.peerFulfillers,
		Approvers:              fl.approvers,
		Store:                  fulfillStore(store),
		Grants:                 grantReg,
		Shadow:                 shadowDecider,
		ShadowTimeout:          fl.policyTimeout,
		ToolMetadata:           toolMetadata,
	})
	opsRT.running(client, engine, ful, grantReg)

	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := engine.Watch(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("policy watch stopped; hot reload is off", "err", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = engine.PollBundle(watchCtx) // --bundle-url; logged and counted by the engine
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = grantReg.Run(watchCtx)
	}()
	if meta != nil {
		// Reloaded like the policy: a broken change keeps the last good
		// metadata (logged by the watcher).
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := meta.Watch(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("tool metadata watch stopped; its hot reload is off", "err", err)
			}
		}()
	}
	if shadow != nil {
		// Reloaded like the live policy: a broken change keeps the
		// last good shadow (logged).
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := shadow.Watch(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("shadow policy watch stopped; its hot reload is off", "err", err)
			}
		}()
	}
	err = ful.Run(ctx, sub.C())
	stopWatch()
	wg.Wait()
	// Cancellations that waited for a session (fulfilments' and
	// prompts') are lost when the client closes: count them after.
	stopElicitor()
	client.Close()
	owed, lost := ful.ShutdownAnswers()
	kept := ful.ShutdownKept()
	unsent := client.Queued()
	if lost > 0 || unsent > 0 {
		msg := fmt.Sprintf("stopped; %d of %d answers were not delivered and %d cancellations were not sent", lost, owed, unsent)
		if kept > 0 {
			msg = fmt.Sprintf("stopped; %d answers could not be written and are kept in the state store, to be sent after a restart on it; %d of %d answers were lost and %d cancellations were not sent", kept, lost, owed, unsent)
		}
		log.Error(msg, "undelivered", lost, "kept", kept, "answers", owed, "cancellations_unsent", unsent)
		return failedQuietly(1, errors.New(msg)) // the log line above says it
	}
	if err != nil {
		return err
	}
	if kept > 0 {
		// Not lost: the next run on this --state sends them (docs/operations.md).
		log.Warn(fmt.Sprintf("stopped; %d of %d answers could not be written and are kept in the state store, to be sent after a restart on it", kept, owed), "kept", kept, "answers", owed)
		return nil
	}
	log.Info("stopped; every pending proposal was answered", "answers", owed)
	return nil
}

// Defaults of --max-pending-bytes and --memory-limit, chosen together:
// under them no proposer within the limits can push the process past
// the ceiling docs/limits.md states (512 MiB). A pending proposal costs
// about 15 times its frame in live memory (measured; docs/limits.md says
// where), and frames refused busy cost their read and decode until the
// collector takes them: the soft limit makes it take them before the
// heap doubles, as it would by default (GOGC=100). At 448 MiB the attack
// of docs/limits.md peaked at 473–485 MiB, too near the ceiling; at 384
// MiB, 448–455 MiB.
const (
	defaultMaxPendingBytes = 16 << 20
	defaultMemoryLimit     = 384 << 20
)

// applyMemoryLimit sets the Go runtime's soft memory limit, unless the
// operator set GOMEMLIMIT (the runtime has read it already: it wins).
func applyMemoryLimit(log *slog.Logger, limit int64) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return
	}
	if limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
}

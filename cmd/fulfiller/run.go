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
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/sidecar"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
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
	f.StringVar(&fl.toolMetadata, "tool-metadata", "", "`FILE` (YAML or JSON) of tool annotations the operator declares per tool owner and tool name or pattern, in place of what the owners send (bridged tools send none); hot-reloaded")
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
	f.DurationVar(&fl.policyTimeout, "policy-timeout", 100*time.Millisecond, "longest one policy evaluation may take (then it is tried once more; a second timeout: reject busy)")
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

// policyOptions is how --policy, --data and --bundle-url load, as run
// and --check load them. obs (nil for none) hears of the bundle
// downloads; run's sidecar gives its metrics.
func (fl *runFlags) policyOptions(log *slog.Logger, obs policies.BundleObserver) (policies.Options, error) {
	opts := policies.Options{Policies: fl.policies, Data: fl.data, Timeout: fl.policyTimeout, Logger: log}
	if err := fl.bundle.options(log, &opts, obs); err != nil {
		return policies.Options{}, err
	}
	return opts, nil
}

// policyError names the flag of a policy load's error.
func (fl *runFlags) policyError(err error) error {
	return loadFlagError(err, flagPaths{"--policy", fl.policies}, flagPaths{"--data", fl.data})
}

// loadPolicy loads the live policy as the sidecar does, for --check.
func (fl *runFlags) loadPolicy(ctx context.Context, log *slog.Logger) (*policies.Engine, error) {
	opts, err := fl.policyOptions(log, nil)
	if err != nil {
		return nil, err
	}
	engine, err := sidecar.LoadPolicy(ctx, opts, log)
	if err != nil {
		return nil, fl.policyError(err)
	}
	return engine, nil
}

// loadToolMetadata loads --tool-metadata for --check, or returns nil when
// none is given. A file that does not validate is a usage error naming
// the file, line and key, in --check as at start.
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

// shadowOptions is how --shadow-policy and --shadow-data (default:
// --data) load; nil when no shadow policy is given.
func (fl *runFlags) shadowOptions(log *slog.Logger) (*policies.Options, error) {
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
	return &opts, nil
}

// shadowError is a broken shadow policy's error: a usage error like a
// broken --policy, since a shadow meant to be watched must not silently
// be missing.
func shadowError(err error) error { return usageErrorf("--shadow-policy: %w", err) }

// loadShadow loads the shadow policy for --check; nil when none is given.
func (fl *runFlags) loadShadow(ctx context.Context, log *slog.Logger) (*policies.Engine, error) {
	opts, err := fl.shadowOptions(log)
	if err != nil || opts == nil {
		return nil, err
	}
	engine, err := policies.Load(ctx, *opts)
	if err != nil {
		return nil, shadowError(err)
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
	// Everything below up to the sidecar's start is shared with --check:
	// each step opens or parses with the function run itself uses, so
	// --check fails exactly when run would. What it logs is held until
	// the whole configuration is found good: a fatal error is printed
	// alone, not after warnings about something else.
	log, releaseLogs := holdLogs(log)
	defer releaseLogs(false) // an error: the warnings are dropped
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
	// Reloaded while run runs (an approver enrolled with the team inbox
	// counts at once); a file that is wrong at start is an error.
	var keys *approverkeys.Watcher
	if fl.approverKeys != "" {
		if keys, err = approverkeys.Open(fl.approverKeys, approverkeys.Options{Logger: log}); err != nil {
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
		engine, err := fl.loadPolicy(ctx, log)
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
		releaseLogs(true)
		log.Info("configuration is valid", "revision", engine.Revision(), "files", len(engine.Files()), "approver_keys", len(keys.Keys().IDs()), "tool_metadata_entries", meta.Metadata().Len())
		return nil
	}
	opsCfg, err := fl.ops.config(log)
	if err != nil {
		return err
	}
	targets, err := fl.notify.prepare(log, fl.flagSet())
	if err != nil {
		return err
	}
	// The bundle's downloads are counted by the sidecar's metrics (its
	// Observer is left nil for the sidecar to fill in).
	policy, err := fl.policyOptions(log, nil)
	if err != nil {
		return err
	}
	shadow, err := fl.shadowOptions(log)
	if err != nil {
		return err
	}
	stateMode, err := fl.state.check(log)
	if err != nil {
		return err
	}
	logPromptKey(log, fl.id, promptKey)
	sc, err := sidecar.New(sidecar.Config{
		Gateway: fl.gateway, Space: fl.space, Token: token, ID: fl.id,
		MaxFrame: int64(fl.maxFrame), JoinTimeout: fl.joinTimeout,
		Policy: policy, Shadow: shadow, ToolMetadata: fl.toolMetadata,
		State: &sidecar.StateConfig{Mode: stateMode, Creds: fl.state.creds, Lease: fl.state.lease, SeenTTL: fl.state.seenTTL},
		Fulfill: fulfill.Config{
			MaxPending:       fl.maxPending,
			PendingTTL:       fl.pendingTTL,
			MaxInflight:      fl.maxInflight,
			FulfillTimeout:   fl.fulfillTimeout,
			TaskTimeout:      fl.taskTimeout,
			StatusChats:      fl.statusChats,
			OwnerRejoinGrace: fl.ownerRejoinGrace,
			ApprovalTimeout:  fl.approvalTimeout,
			ShutdownTimeout:  fl.shutdownTimeout,

			MaxPendingBytes:        int64(fl.maxPendingBytes),
			MaxPendingPerProposer:  fl.maxPendingPerProposer,
			MaxInflightPerProposer: fl.maxInflightPerProposer,
			PeerFulfillers:         fl.peerFulfillers,
		},
		Approvers: fl.approvers, Keys: keys, PromptKey: promptKey,
		GatewayAuthenticatesFrom: fl.gatewayAuthenticatesFrom,
		Ops:                      opsCfg,
		Notify:                   targets, InboxURL: fl.notify.inboxURL,
		Logger: log,
	})
	if err != nil {
		return err
	}
	releaseLogs(true)
	return fl.sidecarError(sc.Run(ctx), stateMode)
}

// sidecarError names the flag or file to blame for the sidecar's error:
// what it could not open or load is a usage error (exit 2) as in
// --check; answers lost at shutdown exit 1 quietly, the log having said
// how many.
func (fl *runFlags) sidecarError(err error, m state.Mode) error {
	var se *sidecar.StartError
	var sh *sidecar.ShutdownError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &sh):
		return failedQuietly(1, err)
	case !errors.As(err, &se):
		return err
	}
	switch se.Part {
	case sidecar.PartDecisionLog:
		return decisionLogError(se.Err)
	case sidecar.PartHTTP:
		return listenError(fl.ops.http, se.Err)
	case sidecar.PartPolicy:
		return fl.policyError(se.Err)
	case sidecar.PartShadow:
		return shadowError(se.Err)
	case sidecar.PartToolMetadata:
		return usageErrorf("--tool-metadata %w", se.Err)
	case sidecar.PartState:
		return fmt.Errorf("--state %s: %w", m, se.Err)
	}
	return err
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

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/policies"
)

// newMCPCmd is `fulfiller mcp`: fulfiller's decisions in front of MCP
// servers (docs/design.md, "The MCP front end"). `fulfiller mcp [flags]
// -- COMMAND ARGS` serves one client over stdio in front of COMMAND;
// `mcp serve` serves clients over Streamable HTTP. The subcommands that manage the front end's
// files (init, accept-tools) are mcpAdminCommands.
func newMCPCmd() *cobra.Command {
	fl := mcpFlags{}
	cmd := &cobra.Command{
		Use:   "mcp [flags] -- COMMAND [ARG...]",
		Short: "Decide an MCP client's tool calls with Rego policies, in front of MCP servers",
		Long: `mcp stands in front of the MCP server COMMAND (started with ARGs) for the MCP
client that started it, over stdio: every tools/call is decided by the policies
in --policy (fulfil, reject with a reason the model reads, or ask the person at
the client through elicitation: "@caller"); everything else passes through.
Other approvers answer in the team inbox hosted with --inbox ADDR (enrolled with
"fulfiller inbox enrol", docs/mcp.md#team-approvers); --notify tells them of
prompts, --http serves the metrics and operator API (grants list, pending).
Logs go to stderr, never stdout.`,
		Example: `  claude mcp add fs -- fulfiller mcp -- npx -y @modelcontextprotocol/server-filesystem ~/src`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 0 {
				if len(args) > 0 {
					return unknownCommand(cmd, args)
				}
				return usageErrorf("no server to stand in front of: fulfiller mcp [flags] -- COMMAND [ARG...]")
			}
			if cmd.ArgsLenAtDash() > 0 {
				return usageErrorf("unexpected %q before --: fulfiller mcp [flags] -- COMMAND [ARG...]", args[0])
			}
			if len(args) == 0 {
				return usageErrorf("no COMMAND after --: fulfiller mcp [flags] -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fl.cmd = cmd
			return runMCPStdio(cmd.Context(), fl, args)
		},
	}
	fl.register(cmd.Flags())
	cmd.Flags().StringVar(&fl.name, "name", "", "the upstream's `NAME`: tool.server in the policy input, what pins and grants are keyed by (default: the serverInfo.name it gives)")
	cmd.AddCommand(newMCPServeCmd())
	cmd.AddCommand(mcpAdminCommands()...)
	return cmd
}

// mcpFlags are the flags of mcp and mcp serve: run's where they mean the
// same.
type mcpFlags struct {
	cmd                 *cobra.Command
	policies, data      []string
	state               string
	stateCreds          string
	decisionLog         string
	toolMetadata        string
	approvers           []string
	clientID            string
	approvalTimeout     time.Duration
	fulfillTimeout      time.Duration
	policyTimeout       time.Duration
	logFormat, logLevel string
	name                string
	approverKeys        string
	// notify is run's --notify and its companions; ops only its
	// --http, --http-token and --http-token-file (--decision-log is
	// mcp's own).
	notify notifyFlags
	ops    opsFlags
	// inbox is the team inbox hosted in-process (--inbox ADDR), on
	// inbox serve's --inbox-dir; its page's origin is --inbox-origin.
	inbox       string
	inboxDir    inboxFlags
	inboxOrigin string // the inbox's page, once started
	// inboxCert and inboxKey serve the inbox over HTTPS itself
	// (--inbox-tls-cert, --inbox-tls-key), as inbox serve's --tls-cert.
	inboxCert, inboxKey string
	log                 *slog.Logger // set by start
}

func (fl *mcpFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&fl.policies, "policy", nil, "Rego policy file or directory (repeatable; default: "+filepath.Join(mcpConfigDir(), "policies")+" when it exists)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document for the policies (repeatable; default: "+filepath.Join(mcpConfigDir(), "data.yaml")+" when it exists)")
	f.StringVar(&fl.state, "state", mcpStateDir(), "where tool pins, grants and (on NATS) held calls live: a `DIR` every fulfiller mcp on it shares, nats://host:4222[,nats://…] or tls://… (a NATS JetStream cluster several mcp serve instances share), or memory")
	f.StringVar(&fl.stateCreds, "state-creds", "", "NATS credentials `FILE` for a nats:// or tls:// --state (credentials are never accepted in the URL)")
	f.StringVar(&fl.toolMetadata, "tool-metadata", "", "`FILE` (YAML or JSON) of tool annotations declared per upstream NAME and tool, in place of what the upstreams send; hot-reloaded")
	f.StringVar(&fl.decisionLog, "decision-log", "", "append every decision and outcome as JSON lines to `FILE` (none by default)")
	f.StringSliceVar(&fl.approvers, "approvers", nil, "approvers asked when an escalating policy names none (comma-separated ids; @caller is the person at the client)")
	f.StringVar(&fl.clientID, "client-id", "local", "the client's id: input.proposer.id, and whom grants name")
	f.DurationVar(&fl.approvalTimeout, "approval-timeout", 5*time.Minute, "a human's deadline when the policy sets none")
	f.DurationVar(&fl.fulfillTimeout, "fulfill-timeout", 5*time.Minute, "wait for the upstream's answer to an allowed call before cancelling it and rejecting timeout")
	f.DurationVar(&fl.policyTimeout, "policy-timeout", 100*time.Millisecond, "longest one policy evaluation may take")
	f.StringVar(&fl.logFormat, "log-format", "text", "log format (to stderr): text or json")
	f.StringVar(&fl.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&fl.approverKeys, "approver-keys", "", "`FILE` of \"<approver id> <base64url Ed25519 public key>\" or \"<approver id> webauthn <credential>\" lines: those approvers' answers count only when signed (default with --inbox: --inbox-dir/passkeys)")
	f.StringVar(&fl.inbox, "inbox", "", "host the team inbox on `ADDR` (loopback host:port behind a proxy that terminates TLS for --inbox-origin, or any host:port with --inbox-tls-cert): approvers other than @caller answer there, with the passkeys enrolled by \"fulfiller inbox enrol\"")
	f.StringVar(&fl.inboxCert, "inbox-tls-cert", "", "serve the team inbox over HTTPS with this certificate `FILE` (PEM; needed beyond loopback)")
	f.StringVar(&fl.inboxKey, "inbox-tls-key", "", "the private key `FILE` of --inbox-tls-cert (PEM)")
	f.StringVar(&fl.inboxDir.dir, "inbox-dir", "", "`DIR` of the team inbox's enrolment links, passkeys (DIR/passkeys) and tokens, as inbox serve's (required with --inbox)")
	f.StringVar(&fl.inboxDir.origin, "inbox-origin", "", "the team inbox's `URL` as browsers see it, https://host[:port] (default: http://localhost:PORT of --inbox); enrol with the same --origin")
	fl.notify.register(f)
	f.StringVar(&fl.ops.http, "http", "", "serve /healthz, /readyz, /metrics and the operator API (grants, pending calls) on `ADDR` (e.g. 127.0.0.1:9464)")
	f.StringVar(&fl.ops.httpToken, "http-token", "", "bearer token the operator API (/v1/) requires; without one /v1/ answers 401 (prefer FULFILLER_HTTP_TOKEN or --http-token-file; never logged)")
	f.StringVar(&fl.ops.httpTokenFile, "http-token-file", "", "read the operator API's bearer token from `FILE` (read once at start, trimmed; mode 0600)")
}

// validate checks what only flags say; exit 2 with one line otherwise.
func (fl *mcpFlags) validate() (state.Mode, error) {
	m, err := state.ParseMode(fl.state)
	if err != nil {
		return state.Mode{}, usageErrorf("--state %v", err)
	}
	if fl.stateCreds != "" && m.Kind != state.External {
		return state.Mode{}, usageErrorf("--state-creds is only for a nats:// or tls:// --state, not %s", m)
	}
	if fl.clientID == "" {
		return state.Mode{}, usageErrorf("--client-id must not be empty")
	}
	for name, v := range map[string]time.Duration{"--approval-timeout": fl.approvalTimeout, "--fulfill-timeout": fl.fulfillTimeout, "--policy-timeout": fl.policyTimeout} {
		if v <= 0 {
			return state.Mode{}, usageErrorf("%s %s: must be positive", name, v)
		}
	}
	switch {
	case fl.inbox == "" && (fl.inboxDir.dir != "" || fl.inboxDir.origin != "" || fl.inboxCert != "" || fl.inboxKey != ""):
		return state.Mode{}, usageErrorf("--inbox-dir, --inbox-origin and --inbox-tls-cert go with --inbox ADDR: the team inbox this process hosts")
	case fl.inbox != "":
		if err := fl.inboxDir.needDir(); err != nil {
			return state.Mode{}, err
		}
		host, _, err := net.SplitHostPort(fl.inbox)
		if err != nil {
			return state.Mode{}, usageErrorf("--inbox %q: want host:port, e.g. %s", fl.inbox, defaultInboxListen)
		}
		if (fl.inboxCert == "") != (fl.inboxKey == "") {
			return state.Mode{}, usageErrorf("--inbox-tls-cert and --inbox-tls-key go together")
		}
		if fl.inboxCert != "" {
			if _, err := tls.LoadX509KeyPair(fl.inboxCert, fl.inboxKey); err != nil {
				return state.Mode{}, usageErrorf("--inbox-tls-cert %s, --inbox-tls-key %s: %v", fl.inboxCert, fl.inboxKey, err)
			}
		} else if !loopback(host) {
			return state.Mode{}, usageErrorf("--inbox %s: plain HTTP only on loopback (127.0.0.1, ::1, localhost), behind a reverse proxy that terminates TLS for --inbox-origin; give --inbox-tls-cert and --inbox-tls-key to serve on %s", fl.inbox, host)
		}
		if fl.inboxDir.origin != "" {
			if _, err := checkOrigin(fl.inboxDir.origin); err != nil {
				return state.Mode{}, usageErrorf("--inbox-origin%s", strings.TrimPrefix(err.Error(), "--origin"))
			}
		}
	}
	return m, nil
}

// defaults fills --policy and --data from the user's configuration
// directory when they are not given and it has them (a client starts
// fulfiller mcp in whatever directory it likes).
func (fl *mcpFlags) defaults() {
	if !fl.cmd.Flags().Changed("policy") {
		if p := filepath.Join(mcpConfigDir(), "policies"); exists(p) {
			fl.policies = []string{p}
		}
	}
	if !fl.cmd.Flags().Changed("data") {
		if p := filepath.Join(mcpConfigDir(), "data.yaml"); exists(p) {
			fl.data = []string{p}
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// start validates the flags and starts the front end in front of ups.
func (fl *mcpFlags) start(ctx context.Context, ups []mcpfront.Upstream) (*mcpserve.Server, error) {
	m, err := fl.validate()
	if err != nil {
		return nil, err
	}
	fl.defaults()
	log, err := newLogger(fl.cmd.ErrOrStderr(), fl.logFormat, fl.logLevel)
	if err != nil {
		return nil, err
	}
	fl.log = log
	warnConfig(log, fl.cmd, httpToken)
	if fl.stateCreds != "" {
		if err := checkCredsFile(fl.stateCreds, log); err != nil {
			return nil, err
		}
	}
	cfg := mcpserve.Config{
		Upstreams: ups, State: m, StateCreds: fl.stateCreds, DecisionLog: fl.decisionLog, ToolMetadata: fl.toolMetadata, ClientID: fl.clientID, Approvers: fl.approvers,
		Policy:          policies.Options{Policies: fl.policies, Data: fl.data, Timeout: fl.policyTimeout, Logger: log},
		ApprovalTimeout: fl.approvalTimeout, FulfillTimeout: fl.fulfillTimeout, Version: buildVersion(), Logger: log,
	}
	if err := fl.approvalsConfig(&cfg, log); err != nil {
		return nil, err
	}
	s, err := mcpserve.Start(ctx, cfg)
	if err != nil && cfg.InboxListener != nil {
		_ = cfg.InboxListener.Close()
	}
	var se *mcpserve.StartError
	switch {
	case err == nil:
		if cfg.Inbox != nil {
			// stdout is the MCP client's: the page's address goes to stderr.
			fmt.Fprintf(fl.cmd.ErrOrStderr(), "fulfiller mcp: team inbox on %s/ (approvers enrolled: %s)\n", fl.inboxOrigin, strings.Join(cfg.Inbox.Enrolled(), ", "))
		}
		return s, nil
	case !errors.As(err, &se):
		return nil, err
	case se.Part == "policy":
		return nil, loadFlagError(se.Err, flagPaths{"--policy", fl.policies}, flagPaths{"--data", fl.data})
	case se.Part == "tool metadata":
		return nil, usageErrorf("--tool-metadata %w", se.Err)
	case se.Part == "decision log":
		return nil, decisionLogError(se.Err)
	case se.Part == "state":
		return nil, fmt.Errorf("--state %w", se.Err)
	case se.Part == "http":
		return nil, listenError(fl.ops.http, se.Err)
	}
	return nil, usageError(err)
}

// approvalsConfig fills cfg with who approves beyond @caller and who
// hears of it: the team inbox hosted here (--inbox, built as inbox
// serve builds it), the approver keys (default: the inbox's passkeys),
// the notifications (run's --notify) and the operator API (--http).
func (fl *mcpFlags) approvalsConfig(cfg *mcpserve.Config, log *slog.Logger) error {
	keysFile := fl.approverKeys
	if keysFile == "" && fl.inbox != "" {
		// The inbox relays approvals; only its passkeys make them count.
		keysFile = filepath.Join(fl.inboxDir.dir, teaminbox.PasskeysFile)
	}
	if keysFile != "" {
		keys, err := approverkeys.Open(keysFile, approverkeys.Options{Logger: log})
		if err != nil {
			return fileError("--approver-keys", err)
		}
		cfg.Keys = keys
	}
	fl.ops.logSync = string(decisionlog.SyncAlways) // --decision-log is mcp's own: only --http is checked here
	token, err := fl.ops.prepare(log)
	if err != nil {
		return err
	}
	cfg.HTTP, cfg.HTTPToken = fl.ops.http, token
	if fl.inbox != "" {
		// One directory of approvers: whom --notify reaches, and who may
		// enrol.
		fl.inboxDir.directory = fl.notify.directory
		_, allowed, err := fl.inboxDir.approvers()
		if err != nil {
			return err
		}
		ln, err := listenInbox("--inbox", fl.inbox)
		if err != nil {
			return err
		}
		srv, origin, err := fl.inboxDir.server(log, ln, fl.inboxCert != "", allowed)
		if err != nil {
			_ = ln.Close()
			return err
		}
		cfg.Inbox, cfg.InboxListener, fl.inboxOrigin = srv, ln, origin
		cfg.InboxCertFile, cfg.InboxKeyFile = fl.inboxCert, fl.inboxKey
		if fl.notify.inboxURL == "" {
			fl.notify.inboxURL = origin + "/"
		}
	}
	targets, err := fl.notify.prepare(log, fl.cmd.Flags())
	if err != nil {
		if cfg.InboxListener != nil {
			_ = cfg.InboxListener.Close()
		}
		return err
	}
	cfg.Notify, cfg.InboxURL = targets, fl.notify.inboxURL
	return nil
}

// runMCPStdio is fulfiller mcp -- COMMAND ARGS: one client on stdin and
// stdout, until it leaves (or SIGINT/SIGTERM).
func runMCPStdio(ctx context.Context, fl mcpFlags, argv []string) error {
	// Without --name the upstream is named after its serverInfo.name
	// (the front end's nameless upstream, served as "").
	name := fl.name
	up := mcpfront.CommandUpstream(name, argv, fl.cmd.ErrOrStderr())
	s, err := fl.start(ctx, []mcpfront.Upstream{up})
	if err != nil {
		return err
	}
	// A server that does not start is said at once (exit 1), rather
	// than leaving the client waiting for an initialize answer.
	rctx, cancel := context.WithTimeout(ctx, mcpStartTimeout)
	err = s.Front().Ready(rctx, name)
	cancel()
	if err != nil {
		_ = s.Close()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	serveErr := s.ServeStdio(ctx, name, &mcp.StdioTransport{})
	closeErr := s.Close()
	if serveErr != nil && ctx.Err() == nil && !errors.Is(serveErr, io.EOF) {
		return serveErr
	}
	return closeErr
}

// mcpStartTimeout bounds the wait for an upstream's first start
// (process, initialize, tools/list).
const mcpStartTimeout = 30 * time.Second

// newMCPServeCmd is fulfiller mcp serve: the upstreams over Streamable
// HTTP, one endpoint each (http://ADDR/mcp/NAME), for any number of
// clients.
func newMCPServeCmd() *cobra.Command {
	fl := mcpFlags{}
	var listen, tokensFile string
	var upstreams []string
	cmd := &cobra.Command{
		Use:   "serve --listen ADDR --upstream NAME=cmd:COMMAND ARGS|NAME=URL...",
		Short: "Serve MCP clients over Streamable HTTP in front of the upstreams",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl.cmd = cmd
			if listen == "" {
				return usageErrorf("--listen is required (host:port; loopback unless --client-tokens)")
			}
			if len(upstreams) == 0 {
				return usageErrorf("--upstream is required: NAME=cmd:COMMAND ARGS or NAME=URL (repeatable)")
			}
			var ups []mcpfront.Upstream
			for _, spec := range upstreams {
				up, err := mcpfront.ParseUpstream(spec, cmd.ErrOrStderr())
				if err != nil {
					return usageError(err)
				}
				ups = append(ups, up)
			}
			var tokens mcpfront.ClientTokens
			if tokensFile != "" {
				var err error
				if tokens, err = mcpfront.ReadClientTokens(tokensFile); err != nil {
					return usageErrorf("--client-tokens %w", err)
				}
			}
			if err := mcpfront.CheckListen(listen, tokens); err != nil {
				return usageError(err)
			}
			return runMCPServe(cmd.Context(), fl, listen, tokens, ups)
		},
	}
	fl.register(cmd.Flags())
	cmd.Flags().StringVar(&listen, "listen", "", "`ADDR` (host:port) to serve on; a non-loopback one needs --client-tokens")
	cmd.Flags().StringArrayVar(&upstreams, "upstream", nil, "an upstream: `NAME=cmd:COMMAND ARGS` (split as a POSIX shell would, no expansion) or NAME=URL (repeatable)")
	cmd.Flags().StringVar(&tokensFile, "client-tokens", "", "`FILE` of \"<client-id> <sha256 hex of its bearer token>\" lines: the clients allowed, and who each is")
	return cmd
}

// runMCPServe serves the upstreams on listen until SIGINT/SIGTERM.
func runMCPServe(ctx context.Context, fl mcpFlags, listen string, tokens mcpfront.ClientTokens, ups []mcpfront.Upstream) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usageErrorf("--listen %s: %w", listen, err)
	}
	s, err := fl.start(ctx, ups)
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv := &http.Server{Handler: s.Handler(mcpfront.HTTPOptions{Tokens: tokens}), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// Said once the upstreams are up (an endpoint answers 503 until its
	// upstream has started), or have had their time to start: one that
	// is still down is started again in the background, and logged.
	rctx, cancel := context.WithTimeout(ctx, mcpStartTimeout)
	for _, up := range ups {
		if err := s.Front().Ready(rctx, up.Name); err != nil && ctx.Err() == nil {
			fl.log.Warn("mcp upstream not up yet; serving the others", "err", err)
		}
	}
	cancel()
	fmt.Fprintf(fl.cmd.ErrOrStderr(), "fulfiller mcp serving on http://%s/mcp/NAME\n", ln.Addr())
	// Each endpoint as a client is given it, to copy into its set-up.
	for _, up := range ups {
		fmt.Fprintf(fl.cmd.ErrOrStderr(), "  %s: http://%s/mcp/%s\n", up.Name, ln.Addr(), up.Name)
	}
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	closeErr := s.Close()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return closeErr
}

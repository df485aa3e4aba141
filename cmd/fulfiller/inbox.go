package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/elicit/notify"
)

// inboxFlags are what both inbox subcommands share: where the inbox keeps
// its enrolments and passkeys, the page's origin, and who may enrol.
type inboxFlags struct {
	dir, origin, directory string
}

// defaultInboxListen is where inbox serve listens without --listen:
// loopback, for a reverse proxy on the same machine (docs/operations.md,
// "The team inbox").
const defaultInboxListen = "127.0.0.1:8766"

// Enrolment links last --expires: a day by default, a week at most.
const (
	defaultEnrolTTL = 24 * time.Hour
	maxEnrolTTL     = 7 * 24 * time.Hour
)

func newInboxCmd() *cobra.Command {
	var fl inboxFlags
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Run the team inbox: every approver of a space, with passkeys",
		Long: `The team inbox (docs/approving.md#the-team-inbox) is one web page for all the
approvers of a space: each approver enrols a passkey through a one-time link
the operator makes ("fulfiller inbox enrol ID"), signs in with it, sees only
the prompts addressed to them, and approves with a passkey assertion over the
signed approval bytes, which fulfiller verifies against the passkey pinned in
its --approver-keys: the inbox relays approvals but cannot make or change one.`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&fl.dir, "inbox-dir", "", "`DIR` of the inbox's enrolment links (hashed), enrolled passkeys (DIR/passkeys, --approver-keys lines) and per-approver tokens (required; made with mode 0700)")
	pf.StringVar(&fl.origin, "origin", "", "the inbox's address as browsers see it, https://host[:port] (http://localhost only on this machine): passkeys are bound to its host")
	pf.StringVar(&fl.directory, "approver-directory", "", "`FILE` (YAML or JSON, as run's) of the approvers who may enrol: others are refused")
	cmd.AddCommand(newInboxServeCmd(&fl), newInboxEnrolCmd(&fl), newInboxRevokeCmd(&fl))
	return cmd
}

// checkOrigin validates --origin: https, or http to localhost (a browser
// makes passkeys only in a secure context), scheme://host[:port] only.
func checkOrigin(origin string) (rpID string, err error) {
	u, perr := url.Parse(origin)
	if perr != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", usageErrorf("--origin %q: want https://host[:port], as the browser's address bar shows the inbox", origin)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && u.Hostname() == "localhost":
	default:
		return "", usageErrorf("--origin %s: passkeys need https (http only for localhost)", origin)
	}
	return u.Hostname(), nil
}

// approvers reads --approver-directory: the ids that may enrol, sorted
// (nil without the flag: anyone the operator makes a link for).
func (fl *inboxFlags) approvers() (notify.Directory, []string, error) {
	if fl.directory == "" {
		return nil, nil, nil
	}
	d, err := notify.LoadDirectory(fl.directory)
	if err != nil {
		return nil, nil, usageErrorf("--approver-directory %v", err)
	}
	ids := make([]string, 0, len(d))
	for id := range d {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return d, ids, nil
}

func (fl *inboxFlags) needDir() error {
	if fl.dir == "" {
		return usageErrorf("--inbox-dir is required: the directory of the inbox's enrolments and passkeys")
	}
	return nil
}

// --- enrol ---

func newInboxEnrolCmd(fl *inboxFlags) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "enrol APPROVER",
		Short: "Print a one-time link with which an approver enrols their passkey",
		Long: `enrol makes a one-time enrolment link for APPROVER (their approver id, as the
policies and fulfiller's --approvers name them) and prints it on stdout. The
link works once, until --expires: whoever opens it first enrols a passkey as
APPROVER, so hand it to that person only, over a channel only they read. Only
the link's hash is kept in --inbox-dir; the link itself is not stored or
logged. A running "inbox serve" on the same --inbox-dir honours it at once.

Enrolling again (a new phone, a lost one) replaces the approver's passkey in
--inbox-dir/passkeys; fulfiller run reloads its --approver-keys file when
it changes, so the new passkey counts at once and the old one no longer
does (copy the new line if run reads another file).`,
		Example: `  fulfiller inbox enrol alice --inbox-dir /var/lib/fulfiller-inbox --origin https://inbox.example.com
  https://inbox.example.com/enrol#3q2-7wX…`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("inbox enrol APPROVER: want one approver id, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInboxEnrol(cmd, fl, args[0], ttl)
		},
	}
	cmd.Flags().DurationVar(&ttl, "expires", defaultEnrolTTL, "how long the link works, if nobody uses it (at most 168h)")
	return cmd
}

func runInboxEnrol(cmd *cobra.Command, fl *inboxFlags, id string, ttl time.Duration) error {
	if err := fl.needDir(); err != nil {
		return err
	}
	if fl.origin == "" {
		return usageErrorf("--origin is required: the inbox's address as browsers see it (inbox serve's --origin)")
	}
	if _, err := checkOrigin(fl.origin); err != nil {
		return err
	}
	if ttl <= 0 || ttl > maxEnrolTTL {
		return usageErrorf("--expires %s: want a duration above 0 and at most %s", ttl, maxEnrolTTL)
	}
	dir, _, err := fl.approvers()
	if err != nil {
		return err
	}
	person, listed := dir[id]
	if dir != nil && !listed {
		return usageErrorf("APPROVER %q is not in --approver-directory %s: only the approvers listed there may enrol", id, fl.directory)
	}
	if !teaminbox.ValidApproverID(id) {
		return usageErrorf("APPROVER %q: want letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit", id)
	}
	token, err := teaminbox.CreateEnrolment(fl.dir, id, ttl, time.Now())
	if err != nil {
		return fileError("--inbox-dir", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s/enrol#%s\n", strings.TrimSuffix(fl.origin, "/"), token)
	to := id
	if person.Email != "" {
		to = fmt.Sprintf("%s (%s)", id, person.Email)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "A one-time enrolment link for %s, until %s: whoever opens it first enrols a passkey as %s, so give it to %s only.\n",
		id, time.Now().Add(ttl).UTC().Format("2006-01-02 15:04 MST"), id, to)
	return nil
}

// --- revoke ---

func newInboxRevokeCmd(fl *inboxFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke APPROVER",
		Short: "Remove an approver's passkey: every session of theirs in the inbox ends",
		Long: `revoke removes APPROVER's passkey from --inbox-dir/passkeys (a lost device
that should sign nothing more, someone who left). A running "inbox serve" on
the same --inbox-dir ends every browser session of theirs at their next
request, and fulfiller run, reloading its --approver-keys file, stops
counting the passkey. Enrol them again ("inbox enrol APPROVER") to give them
a new one. Revoking the last passkey leaves a file whose only key line is
"none", which run takes as every key removed on purpose.`,
		Example: `  fulfiller inbox revoke alice --inbox-dir /var/lib/fulfiller-inbox`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("inbox revoke APPROVER: want one approver id, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fl.needDir(); err != nil {
				return err
			}
			id := args[0]
			if err := teaminbox.RevokePasskey(fl.dir, id); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return fileError("--inbox-dir", err)
				}
				return usageError(err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Revoked %s's passkey: every session of theirs in the inbox ends, and fulfiller run stops counting it once it reloads its --approver-keys.\n", id)
			return nil
		},
	}
}

// --- serve ---

type inboxServeFlags struct {
	gateway, space, token, tokenFile string
	fulfillers                       []string
	fulfillerKeys                    string
	listen, cert, key                string
	joinTimeout                      time.Duration
	logFormat, logLevel              string
}

func newInboxServeCmd(fl *inboxFlags) *cobra.Command {
	var sf inboxServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the team inbox and answer prompts for every enrolled approver",
		Long: `serve runs the team inbox: a web page on --listen where each approver enrolled
with "fulfiller inbox enrol" signs in with their passkey and answers the
prompts addressed to them, on a phone or a desktop. For each enrolled approver
it joins the space as that approver (with --token, or the token in
--inbox-dir/tokens/<id> when there is one), as "fulfiller approve" would.

The first line on stdout is the page's address (--origin). Plain HTTP is
served only on loopback, for a reverse proxy on the same machine that
terminates TLS for --origin (docs/operations.md#the-team-inbox-fulfiller-inbox-serve); give
--tls-cert and --tls-key to serve HTTPS yourself.

fulfiller run must pin the passkeys: give it --approver-keys
--inbox-dir/passkeys (or copy its lines); it reloads the file when an
enrolment changes it. Approvals by an approver it has no key for are taken on the
gateway's word, passkey or not.`,
		Example: `  FULFILLER_TOKEN=… fulfiller inbox serve --gateway wss://mew.example.com --inbox-dir /var/lib/fulfiller-inbox \
      --origin https://inbox.example.com --approver-directory approvers.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInboxServe(cmd, fl, sf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sf.gateway, "gateway", "", "gateway WebSocket URL, ws://host:port[/path] (required)")
	f.StringVar(&sf.space, "space", "", "space id sent in the join frames (default: the gateway's configured space)")
	f.StringVar(&sf.token, "token", "", "the participant token the approvers join with (prefer FULFILLER_TOKEN or --token-file; never logged)")
	f.StringVar(&sf.tokenFile, "token-file", "", "read the approvers' participant token from `FILE` (read once at start, trimmed; mode 0600)")
	f.StringArrayVar(&sf.fulfillers, "fulfiller", []string{"fulfiller"}, "participant `ID` of the fulfiller whose requests to show, or the ids of the fulfillers of a group (comma-separated or repeated)")
	f.StringVar(&sf.fulfillerKeys, "fulfiller-keys", "", "`FILE` of \"<fulfiller id> <base64url Ed25519 public key>\" lines: show only requests signed by those keys")
	f.StringVar(&sf.listen, "listen", defaultInboxListen, "serve the page on `ADDR` (host:port)")
	f.StringVar(&sf.cert, "tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; needed beyond loopback)")
	f.StringVar(&sf.key, "tls-key", "", "the private key `FILE` of --tls-cert (PEM)")
	f.DurationVar(&sf.joinTimeout, "join-timeout", 10*time.Second, "wait this long for the gateway's welcome at each join")
	f.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// validate checks serve's own flags and works out the origin.
func (sf *inboxServeFlags) validate(fl *inboxFlags) error {
	if err := fl.needDir(); err != nil {
		return err
	}
	if sf.gateway == "" {
		return usageErrorf("--gateway is required (ws://host:port of the MEW gateway)")
	}
	if u, err := url.Parse(sf.gateway); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return usageErrorf("--gateway %q: want ws://host:port or wss://host:port", sf.gateway)
	}
	ids, err := splitFulfillers(sf.fulfillers)
	if err != nil {
		return err
	}
	sf.fulfillers = ids
	host, _, err := net.SplitHostPort(sf.listen)
	if err != nil {
		return usageErrorf("--listen %q: want host:port, e.g. %s", sf.listen, defaultInboxListen)
	}
	if (sf.cert == "") != (sf.key == "") {
		return usageErrorf("--tls-cert and --tls-key go together")
	}
	if sf.cert != "" {
		if _, err := tls.LoadX509KeyPair(sf.cert, sf.key); err != nil {
			return usageErrorf("--tls-cert %s, --tls-key %s: %v", sf.cert, sf.key, err)
		}
	} else if !loopback(host) {
		return usageErrorf("--listen %s: plain HTTP only on loopback (127.0.0.1, ::1, localhost), for a reverse proxy that terminates TLS; give --tls-cert and --tls-key to serve on %s", sf.listen, host)
	}
	if fl.origin != "" {
		if _, err := checkOrigin(fl.origin); err != nil {
			return err
		}
	}
	return nil
}

// splitFulfillers reads --fulfiller as approve does: comma-separated or
// repeated, no empty or repeated id.
func splitFulfillers(values []string) ([]string, error) {
	given := strings.Join(values, ",")
	var ids []string
	for _, v := range values {
		for id := range strings.SplitSeq(v, ",") {
			id = strings.TrimSpace(id)
			switch {
			case id == "":
				return nil, usageErrorf("--fulfiller %q: an id of the list is empty", given)
			case slices.Contains(ids, id):
				return nil, usageErrorf("--fulfiller %q: %s is listed twice", given, id)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// listenInbox binds the inbox's address, flag naming the flag to blame.
func listenInbox(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return nil, usageErrorf("%s %s: %v", flag, addr, err)
	}
	return ln, nil
}

// server makes the team inbox on --inbox-dir for the page served on ln
// (tls: HTTPS), as inbox serve and fulfiller mcp --inbox host it: the
// origin is --origin, else http(s)://localhost:PORT (a secure context
// for passkeys on this machine, unlike http://127.0.0.1). allowed are the
// approvers who may enrol (nil: anyone).
func (fl *inboxFlags) server(log *slog.Logger, ln net.Listener, tls bool, allowed []string) (*teaminbox.Server, string, error) {
	origin := strings.TrimSuffix(fl.origin, "/")
	if origin == "" {
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		scheme := "http"
		if tls {
			scheme = "https"
		}
		origin = scheme + "://localhost:" + port
	}
	rpID, err := checkOrigin(origin)
	if err != nil {
		return nil, "", err
	}
	srv, err := teaminbox.New(teaminbox.Options{Dir: fl.dir, RPID: rpID, Origin: origin, Approvers: allowed, Logger: log.With("component", "team inbox")})
	if err != nil {
		return nil, "", fileError("--inbox-dir", err)
	}
	if fi, err := os.Stat(fl.dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn(fmt.Sprintf("--inbox-dir %s is open to group or others (mode %#o): chmod 700 it", fl.dir, fi.Mode().Perm()))
	}
	return srv, origin, nil
}

func runInboxServe(cmd *cobra.Command, fl *inboxFlags, sf inboxServeFlags) error {
	if err := sf.validate(fl); err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), sf.logFormat, sf.logLevel)
	if err != nil {
		return err
	}
	warnConfig(log, cmd, joinToken)
	token, err := joinToken.resolve(log, sf.token, sf.tokenFile)
	if err != nil {
		return err
	}
	fulKeys, err := loadFulfillerKeys(sf.fulfillerKeys, sf.fulfillers)
	if err != nil {
		return err
	}
	_, allowed, err := fl.approvers()
	if err != nil {
		return err
	}
	ln, err := listenInbox("--listen", sf.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	srv, origin, err := fl.server(log, ln, sf.cert != "", allowed)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	join := func(ctx context.Context, id string) (approver.Link, error) {
		tok := token
		if own, err := teaminbox.ApproverToken(fl.dir, id); err == nil {
			tok = own
		} else if !errors.Is(err, os.ErrNotExist) {
			return approver.Link{}, err
		}
		c, subs, err := agent.DialSubscribed(ctx, agent.Config{URL: sf.gateway, Space: sf.space, Token: tok, ID: id, JoinTimeout: sf.joinTimeout,
			Logger: log.With("component", "agent")}, approver.SubscribeOptions())
		if err != nil {
			return approver.Link{}, fmt.Errorf("join %s as %s: %w", sf.gateway, id, err)
		}
		return approver.SpaceLink(c, subs[0]), nil
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, sf.cert, sf.key) }()
	members := make(chan error, 1)
	go func() {
		members <- srv.Run(ctx, join, approver.Options{FulfillerKeys: fulKeys, Fulfillers: sf.fulfillers, Open: webCards})
	}()
	// docs/operations.md: the page's address is the first line on stdout.
	fmt.Fprintln(cmd.OutOrStdout(), origin+"/")
	log.Info("team inbox serving", "origin", origin, "listen", ln.Addr().String(), "enrolled", srv.Enrolled(),
		"passkeys", filepath.Join(fl.dir, teaminbox.PasskeysFile))
	var serveErr error
	select {
	case serveErr = <-served:
		cancel()
	case <-ctx.Done():
		serveErr = <-served
	}
	<-members
	return serveErr
}

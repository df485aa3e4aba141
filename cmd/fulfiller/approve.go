package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox"
)

type approveFlags struct {
	gateway, space, token, id string
	tokenFile                 string
	key                       string
	fulfillerKeys             string
	fulfillers                []string
	auto, reason              string
	count                     int
	joinTimeout               time.Duration
	color, logLevel           string
	web                       webFlags
}

func newApproveCmd() *cobra.Command {
	var fl approveFlags
	cmd := &cobra.Command{
		Use:   "approve",
		Short: "Answer the fulfiller's approval requests as a human approver",
		Long: `approve joins the space as a human approver (--id) and shows each approval
request (MCP elicitation/create) the fulfiller addresses to you as a card: who
proposed what, on which server, the arguments, why the policy asks, the call's
digest and the time left. Press a to approve, e to change the editable
arguments and approve, d to decline (with a reason for the proposer), g to
hand the request to another approver, c to dismiss it (only what the card
allows is offered). A reason or an edited value is typed with line editing. A
card that goes away says why (withdrawn by the proposer, deadline passed,
decided by other approvers, cancelled by the operator, the fulfiller left), and
after an approval you see the outcome: fulfilled, or rejected by the policy.

--fulfiller names the fulfiller whose requests you answer; for a group of
fulfillers sharing a state store, name every member (--fulfiller a,b,c): a
member adopts a lapsed member's open requests and asks them again from its
own id, and your answer goes to the member that asked last.

With --key, every answer is signed with your private key (see "fulfiller keys
generate"); the fulfiller needs the matching public key in --approver-keys.

With --fulfiller-keys, only requests signed by the fulfiller's prompt key
(fulfiller run --prompt-key) are shown; any other claiming to come from the
fulfiller is dropped with a notice. Without it, a request that reuses an open
card's ids with other content marks that card contested: it cannot be answered,
and the operator must be asked (the gateway does not authenticate senders).

--web ADDR (e.g. 127.0.0.1:8765) serves the requests as a live page in your
browser instead of cards here: the first line printed
is the page's address, with a secret that the page needs (it then keeps it in
a cookie); without it every page answers 401. Plain HTTP is served only on
loopback; give --web-tls-cert and --web-tls-key to serve it elsewhere. The
same answers, signatures and recovery as the terminal card.

--auto accept|decline answers every request without asking, for scripts and
tests; --count stops after that many answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runApprove(cmd, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.gateway, "gateway", "", "gateway WebSocket URL, ws://host:port[/path] (required)")
	f.StringVar(&fl.space, "space", "", "space id sent in the join frame (default: the gateway's configured space)")
	f.StringVar(&fl.token, "token", "", "your participant token (prefer FULFILLER_TOKEN or --token-file; never logged)")
	f.StringVar(&fl.tokenFile, "token-file", "", "read your participant token from `FILE` (read once at start, trimmed; mode 0600)")
	f.StringVar(&fl.id, "id", "", "your approver id, as the policies and the fulfiller's --approvers name you (required)")
	f.StringVar(&fl.key, "key", "", "private key `FILE` to sign answers with (from fulfiller keys generate)")
	f.StringVar(&fl.fulfillerKeys, "fulfiller-keys", "", "`FILE` of \"<fulfiller id> <base64url Ed25519 public key>\" lines (fulfiller keys generate --prompt): show only requests signed by those keys")
	f.StringArrayVar(&fl.fulfillers, "fulfiller", []string{"fulfiller"}, "participant `ID` of the fulfiller whose requests to show, or the ids of the fulfillers of a group (comma-separated or repeated)")
	f.StringVar(&fl.auto, "auto", "", "answer every request without asking: accept or decline")
	f.StringVar(&fl.reason, "reason", "", "with --auto: the reason sent with each answer")
	f.IntVar(&fl.count, "count", 0, "stop after this many answers (0: run until interrupted)")
	f.DurationVar(&fl.joinTimeout, "join-timeout", 10*time.Second, "wait for the gateway's welcome")
	f.StringVar(&fl.color, "color", "auto", "colour the cards: auto (when stdout is a terminal), always or never")
	f.StringVar(&fl.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fl.web.register(f, "answer in your browser: serve the approval inbox on `ADDR` (host:port, e.g. "+defaultWebAddr+")", false)
	return cmd
}

func (fl *approveFlags) validate() error {
	// Split here, not by a StringSlice flag: an empty element ("a,,b", or
	// --fulfiller "" from an unset variable) must be an error, not dropped.
	given := strings.Join(fl.fulfillers, ",")
	var ids []string
	for _, v := range fl.fulfillers {
		for id := range strings.SplitSeq(v, ",") {
			ids = append(ids, strings.TrimSpace(id)) // "a, b" as typed
		}
	}
	fl.fulfillers = ids
	if fl.gateway == "" {
		return usageErrorf("--gateway is required (ws://host:port of the MEW gateway)")
	}
	if u, err := url.Parse(fl.gateway); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return usageErrorf("--gateway %q: want ws://host:port or wss://host:port", fl.gateway)
	}
	switch {
	case fl.id == "":
		return usageErrorf("--id is required: the approver id you answer as")
	case slices.Contains(fl.fulfillers, fl.id):
		return usageErrorf("--id %q is the fulfiller's own id; approve joins as a human approver (is FULFILLER_ID set for the sidecar?)", fl.id)
	}
	for i, id := range fl.fulfillers {
		switch {
		case id == "":
			return usageErrorf("--fulfiller %q: id %d of the list is empty", given, i+1)
		case slices.Contains(fl.fulfillers[:i], id):
			return usageErrorf("--fulfiller %q: %s is listed twice", given, id)
		}
	}
	switch fl.auto {
	case "", "accept", "decline":
	default:
		return usageErrorf("--auto %q: want accept or decline", fl.auto)
	}
	if fl.reason != "" && fl.auto == "" {
		return usageErrorf("--reason is for --auto answers; interactively you are asked for one")
	}
	if fl.count < 0 {
		return usageErrorf("--count %d: must not be negative", fl.count)
	}
	if fl.web.addr != "" && fl.auto != "" {
		return usageErrorf("--web and --auto: --auto answers without asking, so there is nothing to show")
	}
	return fl.web.validate()
}

func runApprove(cmd *cobra.Command, fl approveFlags) (retErr error) {
	if err := fl.validate(); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	outFile, _ := out.(*os.File)
	if outFile == nil {
		outFile = os.Stdout
	}
	color, err := colorMode(fl.color, outFile)
	if err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), "text", fl.logLevel)
	if err != nil {
		return err
	}
	warnConfig(log, cmd, joinToken)
	token, err := joinToken.resolve(log, fl.token, fl.tokenFile)
	if err != nil {
		return err
	}
	var key ed25519.PrivateKey
	if fl.key != "" {
		if key, err = approver.LoadKey(fl.key); err != nil {
			return usageErrorf("--key %v", err)
		}
	}

	fulKeys, err := loadFulfillerKeys(fl.fulfillerKeys, fl.fulfillers)
	if err != nil {
		return err
	}

	ctx := cmd.Context()
	var ui approver.UI
	open := 1
	switch {
	case fl.web.addr != "":
		signing := ""
		if key != nil {
			signing = "answers are signed"
		}
		in, err := inbox.New(inbox.Options{Approver: fl.id, Signing: signing, Fulfillers: fl.fulfillers, Logger: log})
		if err != nil {
			return err
		}
		var url string
		var stop func() error
		ctx, url, stop, err = serveWeb(ctx, &fl.web, in)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil && retErr == nil {
				retErr = err
			}
		}()
		// docs/design.md: the page's address is the first line on stdout.
		fmt.Fprintln(out, url)
		ui, open = in, webCards
	case fl.auto == "accept" || fl.auto == "decline":
		ui = &approver.Auto{Approve: fl.auto == "accept", Reason: fl.reason, Out: out}
	default:
		if in, ok := cmd.InOrStdin().(*os.File); ok {
			ui = approver.NewTerminal(in, out, color)
		} else {
			ui = &approver.Terminal{In: cmd.InOrStdin(), Out: out, Color: color}
		}
	}

	// Subscribed from the join on: the fulfiller re-sends open prompts the
	// moment we appear, and one read before a later Subscribe would be lost.
	client, subs, err := agent.DialSubscribed(ctx, agent.Config{URL: fl.gateway, Space: fl.space, Token: token, ID: fl.id, JoinTimeout: fl.joinTimeout, Logger: log},
		approver.SubscribeOptions())
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return fmt.Errorf("join %s as %s: %w", fl.gateway, fl.id, err)
	}
	defer client.Close()
	sub := subs[0]
	defer sub.Close()

	signing := "answers are not signed (no --key)"
	if key != nil {
		signing = "answers are signed: " + approver.PublicLine(fl.id, key)
	}
	prompts := "requests are not signed (no --fulfiller-keys)"
	if fulKeys != nil {
		prompts = "only requests signed by the pinned fulfiller keys are shown"
	}
	fmt.Fprintf(out, "fulfiller approve: in the space at %s as %s; %s; %s.\nWaiting for approval requests from %s. Ctrl-C to stop.\n", fl.gateway, fl.id, signing, prompts, strings.Join(fl.fulfillers, ", "))
	return approver.New(client, ui, approver.Options{Key: key, FulfillerKeys: fulKeys, Fulfillers: fl.fulfillers, Limit: fl.count, Open: open, Logger: log}).Run(ctx, sub.C())
}

//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
)

// TestInboxFlagErrors: every bad value of an inbox flag or argument stops
// the command with exit 2 and one line naming it.
func TestInboxFlagErrors(t *testing.T) {
	dir := t.TempDir()
	directory := filepath.Join(dir, "approvers.yaml")
	if err := os.WriteFile(directory, []byte("alice: {email: alice@example.com}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const gw, d, o = "--gateway=ws://127.0.0.1:1", "--inbox-dir=/nonexistent/never-made", "--origin=https://inbox.example.com"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", gw}, "--inbox-dir is required"},
		{[]string{"serve", d}, "--gateway is required"},
		{[]string{"serve", d, "--gateway", "http://127.0.0.1:1"}, "--gateway"},
		{[]string{"serve", d, gw, "--listen", "8766"}, "--listen"},
		{[]string{"serve", d, gw, "--listen", "0.0.0.0:8766"}, "--listen 0.0.0.0:8766: plain HTTP only on loopback"},
		{[]string{"serve", d, gw, "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", d, gw, "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert /nonexistent/c.pem"},
		{[]string{"serve", d, gw, "--origin", "http://inbox.example.com"}, "--origin http://inbox.example.com: passkeys need https"},
		{[]string{"serve", d, gw, "--origin", "https://inbox.example.com/?token=x"}, "--origin"},
		{[]string{"serve", d, gw, "--fulfiller", "a,,b"}, "--fulfiller"},
		{[]string{"serve", d, gw, "--log-level", "loud"}, "--log-level"},
		{[]string{"serve", "--inbox-dir", dir, gw, "--approver-directory", filepath.Join(dir, "missing.yaml")}, "--approver-directory"},
		{[]string{"enrol", "alice", o}, "--inbox-dir is required"},
		{[]string{"enrol", "alice", "--inbox-dir", dir}, "--origin is required"},
		{[]string{"enrol", "--inbox-dir", dir, o}, "inbox enrol APPROVER: want one approver id"},
		{[]string{"enrol", "alice", "bob", "--inbox-dir", dir, o}, "inbox enrol APPROVER: want one approver id"},
		{[]string{"enrol", "../alice", "--inbox-dir", dir, o}, `APPROVER "../alice"`},
		{[]string{"enrol", "alice", "--inbox-dir", dir, o, "--expires", "0s"}, "--expires 0s"},
		{[]string{"enrol", "alice", "--inbox-dir", dir, o, "--expires", "200h"}, "--expires 200h0m0s"},
		{[]string{"enrol", "alice", "--inbox-dir", dir, "--origin", "ftp://x"}, "--origin"},
		{[]string{"enrol", "mallory", "--inbox-dir", dir, o, "--approver-directory", directory}, `APPROVER "mallory" is not in --approver-directory`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := cli(t, "", append([]string{"inbox"}, tc.args...)...)
			if code != 2 || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a usage error (exit 2)", code, stdout, stderr)
			}
			if !strings.HasPrefix(stderr, "fulfiller: ") || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr %q does not name %q on one line", stderr, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("a refused enrol left files in --inbox-dir: %v", entries)
	}
}

// inboxPolicy escalates production writes to alice.
const inboxPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "production writes need a human"} if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
}
`

// inboxWorld is a space with a file server, and the binaries of the
// story: fulfiller inbox serve and enrol, then fulfiller run.
type inboxWorld struct {
	t      *testing.T
	ctx    context.Context
	bin    string
	srv    *space.Server
	wire   *spacetest.Wire
	dir    string // --inbox-dir
	origin string
	logs   lockedBuffer // the inbox's, then the fulfiller's
}

func newInboxWorld(t *testing.T) *inboxWorld {
	t.Helper()
	bin := fulfillerBinary(t)
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w := &inboxWorld{t: t, ctx: ctx, bin: bin, srv: srv, wire: spacetest.RecordWire(t, srv), dir: filepath.Join(t.TempDir(), "inbox")}
	files := toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "tool-token"), files.Tools()...)
	return w
}

// serve starts `fulfiller inbox serve` on a free loopback port, joined
// with human-token from the environment, and returns the page's address
// it printed first.
func (w *inboxWorld) serve(extra ...string) string {
	w.t.Helper()
	var stdout lockedBuffer
	cmd := exec.CommandContext(w.ctx, w.bin, append([]string{"inbox", "serve", "--gateway", w.srv.URL(), "--inbox-dir", w.dir,
		"--listen", "127.0.0.1:0", "--log-format", "json"}, extra...)...)
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=human-token")
	cmd.Stdout, cmd.Stderr = &stdout, &w.logs
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	spacetest.WaitText(w.t, "inbox serve's first line", stdout.String, "\n")
	first, _, _ := strings.Cut(stdout.String(), "\n")
	if !regexp.MustCompile(`^http://localhost:\d+/$`).MatchString(first) {
		w.t.Fatalf("first line %q, want the page's address http://localhost:PORT/", first)
	}
	w.origin = strings.TrimSuffix(first, "/")
	return first
}

// enrol runs `fulfiller inbox enrol id` and returns the link it printed.
func (w *inboxWorld) enrol(id string) string {
	w.t.Helper()
	cmd := exec.CommandContext(w.ctx, w.bin, "inbox", "enrol", id, "--inbox-dir", w.dir, "--origin", w.origin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("inbox enrol %s: %v\n%s", id, err, stderr.String())
	}
	link := stdout.String()
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(w.origin) + `/enrol#[A-Za-z0-9_-]{43}\n$`).MatchString(link) {
		w.t.Fatalf("inbox enrol printed %q, want one line: %s/enrol#<token>", link, w.origin)
	}
	if !strings.HasPrefix(stderr.String(), "A one-time enrolment link for "+id+", until ") {
		w.t.Errorf("inbox enrol said %q", stderr.String())
	}
	return strings.TrimSpace(link)
}

// enrolBegin asks the inbox to start an enrolment with the link's token,
// as the page does: the status and the error it gives.
func (w *inboxWorld) enrolBegin(link string) (int, string) {
	w.t.Helper()
	_, token, _ := strings.Cut(link, "#")
	req, _ := http.NewRequest(http.MethodPost, w.origin+"/api/enrol/begin", strings.NewReader(`{"token":"`+token+`"}`))
	req.Header.Set("Origin", w.origin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Approver string `json:"approver"`
		Error    string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Approver + out.Error
}

// TestInboxServeAndEnrolLink: inbox serve answers (its page, and 401 for
// the cards of nobody signed in); enrol prints a link whose token the
// server knows as the approver's, and a fetch of the link itself (what a
// mail scanner does) enrols nobody: the token is in the fragment.
func TestInboxServeAndEnrolLink(t *testing.T) {
	t.Parallel()
	w := newInboxWorld(t)
	page := w.serve()
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `<button id="login-button" type="button">Sign in with passkey</button>`) {
		t.Fatalf("GET %s: %s\n%s", page, resp.Status, body)
	}
	if resp, err := http.Get(w.origin + "/api/cards"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /api/cards signed out: %v %v, want 401", resp.Status, err)
	}

	link := w.enrol("alice")
	// A link prefetcher: GET the link, as often as it likes.
	for range 3 {
		resp, err := http.Get(link)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if code, who := w.enrolBegin(link); code != http.StatusOK || who != "alice" {
		t.Fatalf("enrol begin with the link's token: %d %q, want 200 alice", code, who)
	}
	if code, msg := w.enrolBegin(link + "x"); code != http.StatusForbidden || msg != teaminbox.ErrEnrolment.Error() {
		t.Fatalf("enrol begin with another token: %d %q", code, msg)
	}
	// The refusal is logged for the operator, without the token.
	spacetest.WaitText(t, "inbox serve's log", w.logs.String,
		`"msg":"team inbox refused a request","component":"team inbox","path":"/api/enrol/begin","status":403,"approver":"","why":"`+teaminbox.ErrEnrolment.Error()+`"}`)
	if strings.Contains(w.logs.String(), strings.SplitN(link, "#", 2)[1]) {
		t.Errorf("the inbox logged the enrolment token:\n%s", w.logs.String())
	}
}

// TestInboxBinaryPasskeyRoundTrip is the team inbox run as an operator
// would, all through the binary: inbox serve; inbox enrol alice prints a
// link; alice opens it on her phone (headless Chromium at phone width,
// with a CDP virtual authenticator) and enrols a passkey; the link does
// not work a second time; she signs out and signs in again with the
// passkey; fulfiller run pins the enrolled passkey (--approver-keys
// --inbox-dir/passkeys); a production write is escalated to her, she
// approves on the page, and the call is fulfilled exactly once, with the
// exact envelopes on the wire.
func TestInboxBinaryPasskeyRoundTrip(t *testing.T) {
	t.Parallel()
	w := newInboxWorld(t)
	w.serve()
	link := w.enrol("alice")

	phone := browsertest.PasskeyTab(t)
	browsertest.Do(t, phone, "enrol alice", chromedp.Navigate(link),
		chromedp.Click(`//button[normalize-space()="Enrol passkey"]`),
		chromedp.WaitVisible(`//span[@id="who" and normalize-space()="alice"]`))
	keys, err := approval.LoadApproverKeys(filepath.Join(w.dir, teaminbox.PasskeysFile))
	if err != nil || len(keys.Passkeys) != 1 || keys.Passkeys["alice"].Origin != w.origin || keys.Passkeys["alice"].RPID != "localhost" {
		t.Fatalf("enrolled passkeys %+v %v", keys, err)
	}
	// The link works once: opened again, it says so at once and offers
	// no Enrol button (TestTeamInboxEnrolPageAndConsole).
	browsertest.Do(t, phone, "open the used link", chromedp.Navigate("about:blank"), chromedp.Navigate(link),
		chromedp.WaitVisible(`//p[@id="status" and starts-with(normalize-space(), "This enrolment link no longer works")]`),
		chromedp.WaitNotVisible(`//button[normalize-space()="Enrol passkey"]`))
	if code, msg := w.enrolBegin(link); code != http.StatusForbidden || msg != teaminbox.ErrEnrolment.Error() {
		t.Fatalf("the used link: %d %q, want 403", code, msg)
	}
	// Signed out (the session cookie gone), she signs in with the passkey.
	browsertest.Do(t, phone, "sign out", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, network.ClearBrowserCookies, cdp.Empty{})
		return chromedp.Void{}, err
	}, chromedp.Navigate(w.origin+"/"), chromedp.WaitVisible(`//input[@id="login-id"]`))
	browsertest.Do(t, phone, "sign in", chromedp.SendKeys(`//input[@id="login-id"]`, "alice"),
		chromedp.Click(`//button[normalize-space()="Sign in with passkey"]`),
		chromedp.WaitVisible(`//span[@id="who" and normalize-space()="alice"]`))

	// The fulfiller, pinning the passkey the inbox enrolled.
	policy := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(policy, []byte(inboxPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(w.ctx, w.bin, "run", "--gateway", w.srv.URL(), "--policy", policy, "--approver-keys", filepath.Join(w.dir, teaminbox.PasskeysFile),
		"--state", filepath.Join(t.TempDir(), "state"), "--log-format", "json", "--policy-timeout", "1m")
	run.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token")
	run.Stderr = &w.logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Signal(os.Interrupt); _ = run.Wait() })
	coder := spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")
	prop := spacetest.NewProposer(t, coder)
	poll.Until(t, "the fulfiller joined", func() bool { _, ok := coder.Participant("fulfiller"); return ok })

	if _, err := prop.Propose(w.ctx, "p-1", []string{"fs"}, json.RawMessage(`{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}}`)); err != nil {
		t.Fatal(err)
	}
	// She follows a notification's link to the card.
	card := `//article[@data-proposal="p-1" and @data-state="open"]`
	browsertest.Do(t, phone, "the card the link names", chromedp.Navigate(w.origin+"/#proposal=p-1"),
		chromedp.WaitVisible(`//article[@data-proposal="p-1" and @data-state="open" and contains(@class, "linked")]`))
	// At phone width (390 px) the page does not scroll sideways.
	if wide := browsertest.Get(t, phone, "the page's width", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)); wide {
		t.Errorf("the page is wider than the phone's %d px", browsertest.Get(t, phone, "the width", chromedp.Evaluate[int](`window.innerWidth`)))
	}
	browsertest.Do(t, phone, "approve", chromedp.Click(card+`//button[normalize-space()="Approve"]`))
	out, err := prop.Wait(w.ctx, "p-1")
	if err != nil || !out.Fulfilled {
		t.Fatalf("p-1: %+v %v, want fulfilled\n%s", out, err, w.logs.String())
	}
	browsertest.Do(t, phone, "the card answered", chromedp.WaitVisible(`//article[@data-proposal="p-1" and @data-state="sent"]`))

	// On the wire: one prompt to alice, her answer from the inbox signed
	// by her passkey, and one fulfilment.
	var prompts, answers, calls []agent.Envelope
	for _, env := range w.wire.Envelopes() {
		switch {
		case env.From == "fulfiller" && env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"elicitation/create"`):
			prompts = append(prompts, env)
		case env.From == "alice" && env.Kind == agent.KindResponse && strings.Contains(string(env.Payload), `"action"`):
			answers = append(answers, env)
		case env.From == "fulfiller" && env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"tools/call"`):
			calls = append(calls, env)
		}
	}
	if len(prompts) != 1 || len(answers) != 1 || len(calls) != 1 {
		for _, e := range append(append(prompts, answers...), calls...) {
			t.Logf("%s", e.Raw)
		}
		t.Fatalf("%d prompts, %d answers, %d fulfilments; want one each", len(prompts), len(answers), len(calls))
	}
	if prompts[0].To[0] != "alice" || len(prompts[0].To) != 1 {
		t.Errorf("the prompt went to %v", prompts[0].To)
	}
	action, content := spacetest.ElicitResult(t, answers[0])
	var c struct {
		Approve   bool   `json:"approve"`
		Signature string `json:"signature"`
	}
	_ = json.Unmarshal(content, &c)
	var assertion struct {
		Type     string `json:"type"`
		Response struct {
			ClientDataJSON string `json:"clientDataJSON"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(c.Signature), &assertion); err != nil || action != "accept" || !c.Approve || assertion.Type != "public-key" ||
		answers[0].CorrelationID.First() != prompts[0].ID || len(answers[0].To) != 1 || answers[0].To[0] != "fulfiller" {
		t.Errorf("alice's answer %s (%v)", answers[0].Raw, err)
	}
	// Her passkey signed the approval bytes of this prompt and call.
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	if err := approval.VerifyPasskey(keys.Passkeys["alice"], prompts[0].ID, digest, action, content); err != nil {
		t.Errorf("alice's answer does not verify under her enrolled passkey: %v", err)
	}
	// The JSON-RPC id counts the fulfiller's requests, discovery's included.
	rpcID := regexp.MustCompile(`"jsonrpc":"2.0","id":\d+`)
	call := agent.Envelope{Raw: json.RawMessage(rpcID.ReplaceAllString(string(calls[0].Raw), `"jsonrpc":"2.0","id":"*"`))}
	spacetest.Exact(t, call, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["fs"],"kind":"mcp/request","correlation_id":["p-1"],"payload":{"jsonrpc":"2.0","id":"*","method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}}}`)
	if strings.Contains(w.logs.String(), `"forgery"`) {
		t.Errorf("a forgery was logged:\n%s", w.logs.String())
	}
}

// TestInboxEnrolNamesWhomToSendTo: with --approver-directory, enrol says
// to whom the link goes (the address listed), and prints only the link on
// stdout, for scripts.
func TestInboxEnrolNamesWhomToSendTo(t *testing.T) {
	dir := t.TempDir()
	directory := filepath.Join(dir, "approvers.yaml")
	if err := os.WriteFile(directory, []byte("alice: {email: alice@example.com}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cli(t, "", "inbox", "enrol", "alice", "--inbox-dir", filepath.Join(dir, "inbox"), "--origin", "https://inbox.example.com/",
		"--approver-directory", directory, "--expires", "1h")
	if code != 0 || !regexp.MustCompile(`^https://inbox\.example\.com/enrol#[A-Za-z0-9_-]{43}\n$`).MatchString(stdout) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !regexp.MustCompile(`^A one-time enrolment link for alice, until \d{4}-\d\d-\d\d \d\d:\d\d UTC: whoever opens it first enrols a passkey as alice, so give it to alice \(alice@example\.com\) only\.\n$`).MatchString(stderr) {
		t.Errorf("stderr %q", stderr)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "inbox", "enrol"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("enrol/ holds %v (%v), want one pending link", entries, err)
	}
}

// TestInboxRevoke: `inbox revoke ID` removes the approver's passkey from
// the inbox's passkeys file and says what follows; an approver without
// one is a one-line error, exit 2 (issue 41, row 7).
func TestInboxRevoke(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey.Bytes()
	cose, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: pub[1:33], YCoord: pub[33:],
	})
	if err != nil {
		t.Fatal(err)
	}
	line := func(id string) string {
		pk := approval.Passkey{RPID: "localhost", Origin: "http://localhost:8766", CredentialID: []byte("cred-" + id), PublicKey: cose}
		return id + " " + approval.KeyTypeWebAuthn + " " + approval.EncodePasskey(pk) + "\n"
	}
	path := filepath.Join(dir, "passkeys")
	if err := os.WriteFile(path, []byte(line("alice")+line("bob")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(t, "", "inbox", "revoke", "bob", "--inbox-dir", dir)
	if code != 0 || stderr != "Revoked bob's passkey: every session of theirs in the inbox ends, and fulfiller run stops counting it once it reloads its --approver-keys.\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "bob ") || !strings.Contains(string(b), line("alice")) {
		t.Errorf("passkeys after revoke:\n%s", b)
	}
	_, stderr, code = cli(t, "", "inbox", "revoke", "carol", "--inbox-dir", dir)
	if code != 2 || stderr != "fulfiller: carol has no passkey in "+path+"\n" {
		t.Errorf("revoke carol: exit %d, stderr %q", code, stderr)
	}
}

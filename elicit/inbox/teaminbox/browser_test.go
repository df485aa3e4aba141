package teaminbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

const policy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "production writes need a human"} if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
}
`

// world: a space with a file server, the team inbox joined as alice and
// bob (after they enrol), and the real fulfiller started once the
// passkeys are known (it reads --approver-keys at start, as run does).
type world struct {
	t      *testing.T
	ctx    context.Context
	srv    *space.Server
	wire   *spacetest.Wire
	inbox  *teaminbox.Server
	dir    string
	origin string
	wg     sync.WaitGroup
	// grants, when set before startFulfiller, are the fulfiller's grants
	// (what `fulfiller grants list` shows), and its prompts offer them.
	grants *grantstore.Registry
	// events are what this world's fulfiller observed: each test counts
	// its own forgeries, and the tests run in parallel.
	events struct {
		mu   sync.Mutex
		list []elicit.Event
	}
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
		"mallory-token":   {{Kind: "mcp/response"}, {Kind: "mcp/request"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, ctx: ctx, srv: srv, wire: spacetest.RecordWire(t, srv), dir: t.TempDir()}
	t.Cleanup(func() { cancel(); w.wg.Wait(); srv.Close() })
	files := toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	spacetest.ServeTools(t, spacetest.Join(t, ctx, srv, "fs", "tool-token"), files.Tools()...)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// WebAuthn needs a secure context: http://localhost is one.
	w.origin = "http://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
	w.inbox, err = teaminbox.New(teaminbox.Options{Dir: w.dir, RPID: "localhost", Origin: w.origin, Enrolled: w.join})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewUnstartedServer(w.inbox.Handler())
	_ = web.Listener.Close()
	web.Listener = ln
	web.Start()
	t.Cleanup(web.Close)
	return w
}

// join runs the approver client of id with the team inbox as its face,
// as inbox serve does for each enrolled approver.
func (w *world) join(id string) {
	c := spacetest.Join(w.t, w.ctx, w.srv, id, "human-token")
	sub := c.Subscribe(approver.SubscribeOptions())
	client := approver.New(c, w.inbox.UI(id), approver.Options{Open: 64})
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer sub.Close()
		_ = client.Run(w.ctx, sub.C())
	}()
}

// startFulfiller starts the real fulfiller with the passkeys enrolled so
// far as its --approver-keys, and returns the proposer's session.
func (w *world) startFulfiller() *spacetestProposer {
	return w.startFulfillerWith(policy)
}

// startFulfillerWith is startFulfiller deciding with policyText.
func (w *world) startFulfillerWith(policyText string) *spacetestProposer {
	t := w.t
	keys, err := approval.LoadApproverKeys(filepath.Join(w.dir, teaminbox.PasskeysFile))
	if err != nil {
		t.Fatal(err)
	}
	pdir := t.TempDir()
	_ = os.WriteFile(filepath.Join(pdir, "p.rego"), []byte(policyText), 0o644)
	engine, err := policies.Load(w.ctx, policies.Options{Timeout: time.Minute, Policies: []string{filepath.Join(pdir, "p.rego")}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fc := spacetest.Join(t, w.ctx, w.srv, "fulfiller", "fulfiller-token")
	ful := fulfill.New(fc, engine, fulfill.Config{SpaceID: space.DefaultSpaceID, Approvals: elicit.Config{Keys: keys.Ed25519, Passkeys: keys.Passkeys, Observer: w.observe, OfferGrants: w.grants != nil}.Approvals("fulfiller"),
		Grants: w.grants, DiscoverySettle: time.Millisecond})
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	ctx, cancel := context.WithCancel(w.ctx)
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(ctx, fulSub.C()) }()
	t.Cleanup(func() {
		cancel()
		<-fulDone
		if t.Failed() { // what happened on the wire, for a failure seen once under load
			var b strings.Builder
			for _, env := range w.wire.Envelopes() {
				if env.Kind != agent.KindPresence {
					fmt.Fprintf(&b, "%s %s→%v %s %.300s\n", env.Kind, env.From, env.To, env.CorrelationID.First(), env.Payload)
				}
			}
			w.events.mu.Lock()
			for _, e := range w.events.list {
				fmt.Fprintf(&b, "event %+v\n", e)
			}
			w.events.mu.Unlock()
			t.Logf("the space's envelopes and the fulfiller's approval events:\n%s", b.String())
		}
	})
	poll.Until(t, "tool discovery", func() bool { return len(ful.Tools()) == 4 })
	return &spacetestProposer{w: w, c: spacetest.Join(t, w.ctx, w.srv, "coder", "coder-token")}
}

func (w *world) observe(ev elicit.Event) {
	w.events.mu.Lock()
	w.events.list = append(w.events.list, ev)
	w.events.mu.Unlock()
}

// forgeries are the forgeries this world's fulfiller recorded.
func (w *world) forgeries() []elicit.Event {
	w.events.mu.Lock()
	defer w.events.mu.Unlock()
	var out []elicit.Event
	for _, e := range w.events.list {
		if e.Kind == elicit.EventForgery {
			out = append(out, e)
		}
	}
	return out
}

type spacetestProposer struct {
	w *world
	c *agent.Client
}

// propose sends a write_file proposal of path with envelope id id.
func (p *spacetestProposer) propose(id, path string) {
	pr := spacetest.NewProposer(p.w.t, p.c)
	call, _ := json.Marshal(map[string]any{"method": "tools/call", "params": map[string]any{"name": "write_file", "arguments": map[string]any{"path": path, "content": "hi"}}})
	if _, err := pr.Propose(p.w.ctx, id, nil, call); err != nil {
		p.w.t.Fatal(err)
	}
}

// fulfilments counts the fulfiller's tools/call requests for proposal id.
func (w *world) fulfilments(id string) int {
	n := 0
	for _, env := range w.wire.Envelopes() {
		if env.From == "fulfiller" && env.Kind == agent.KindRequest && len(env.To) == 1 && env.To[0] == "fs" &&
			strings.Contains(string(env.Payload), `"tools/call"`) && env.CorrelationID.First() == id {
			n++
		}
	}
	return n
}

// --- the browser ---

// The browser: one headless Chromium with a virtual authenticator per
// person (internal/browsertest).
var (
	browserTab = browsertest.PasskeyTab
	do         = browsertest.Do
)

func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	return browsertest.Get(t, ctx, what, a)
}

func card(id, state string) string {
	return `//article[@data-proposal="` + id + `" and @data-state="` + state + `"]`
}

// enrol opens the one-time link the operator made for id and enrols the
// tab's passkey; the page is then signed in as id.
func (w *world) enrol(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	token, err := teaminbox.CreateEnrolment(w.dir, id, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "enrol "+id, chromedp.Navigate(w.origin+"/enrol#"+token),
		chromedp.Click(`//button[normalize-space()="Enrol passkey"]`),
		chromedp.WaitVisible(`//span[@id="who" and normalize-space()="`+id+`"]`))
}

// TestTeamInboxPasskeyApproval: alice enrols through her one-time link,
// approves with her passkey, and the call is
// fulfilled exactly once; the link does not work twice.
func TestTeamInboxPasskeyApproval(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfiller()

	p.propose("p-1", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-1", "open")))
	do(t, alice, "approve", chromedp.Click(card("p-1", "open")+`//button[normalize-space()="Approve"]`))
	poll.Until(t, "the fulfilment", func() bool { return w.fulfilments("p-1") == 1 })
	do(t, alice, "the card answered", chromedp.WaitVisible(card("p-1", "sent")))
	if f := w.forgeries(); len(f) != 0 {
		t.Fatalf("forgeries: %+v", f)
	}
}

// TestTeamInboxCannotForge: the server changing an answer after the
// passkey signed it (here: the approval's reason) makes the fulfiller
// record a forgery and fulfil nothing; bob's page does not show alice's
// card and his session cannot answer it (403, nothing sent). That an
// enrolment link works once is TestInboxBinaryPasskeyRoundTrip's
// (cmd/fulfiller).
func TestTeamInboxCannotForge(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	bob := browserTab(t)
	w.enrol(t, bob, "bob")
	p := w.startFulfiller()
	w.inbox.SetTamper(func(a *approver.Answer) { a.Reason = "changed by the relay" })

	p.propose("p-2", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-2", "open")))
	// Bob's page asks to answer alice's card: refused before anything is
	// signed or sent.
	status := get(t, bob, "bob answers alice's card", chromedp.Evaluate[int](`(async () => {
		const id = "`+w.requestOf(t, "p-2")+`";
		const r = await fetch("/api/answer/begin", {method: "POST", headers: {"Content-Type": "application/json"},
			body: JSON.stringify({request: id, action: "accept", approve: true})});
		return r.status;
	})()`, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Fatalf("bob's answer to alice's card: HTTP %d, want 403", status)
	}
	// Nor does bob's page show it: each approver sees only their prompts.
	bobCards := get(t, bob, "bob's cards", chromedp.Evaluate[string](`(async () => JSON.stringify(await (await fetch("/api/cards")).json()))()`,
		chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if bobCards != `{"approver":"bob","cards":[]}` {
		t.Fatalf("bob's cards: %s", bobCards)
	}
	do(t, alice, "approve", chromedp.Click(card("p-2", "open")+`//button[normalize-space()="Approve"]`))
	poll.Until(t, "the forgery", func() bool { return len(w.forgeries()) == 1 })
	if f := w.forgeries()[0]; f.Approver != "alice" || f.ProposalID != "p-2" {
		t.Fatalf("forgery event %+v", f)
	}
	if n := w.fulfilments("p-2"); n != 0 {
		t.Fatalf("%d fulfilments of a tampered approval", n)
	}
	rid := w.requestOf(t, "p-2")
	for _, env := range w.wire.Envelopes() {
		if env.From == "bob" && env.Kind == agent.KindResponse && env.CorrelationID.First() == rid {
			t.Fatalf("bob's session sent %s", env.Payload)
		}
	}
}

// requestOf is the elicitation envelope id of the prompt about proposal.
func (w *world) requestOf(t *testing.T, proposal string) string {
	t.Helper()
	env := w.wire.WaitFor(t, "the prompt of "+proposal, func(env agent.Envelope) bool {
		return env.From == "fulfiller" && env.Kind == agent.KindRequest && strings.Contains(string(env.Payload), `"elicitation/create"`) &&
			strings.Contains(string(env.Payload), `"id":"`+proposal+`"`)
	})
	return env.ID
}

// TestTeamInboxCannotChangeTheCall: the server adding an edit to alice's
// approval after her passkey signed it (the path of the call, to one of
// its choosing) makes the fulfiller record a forgery and fulfil nothing:
// neither the call she approved nor the one the server made of it.
func TestTeamInboxCannotChangeTheCall(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	w.enrol(t, alice, "alice")
	p := w.startFulfillerWith(strings.Replace(policy, `"message": "production writes need a human"`,
		`"message": "production writes need a human", "editable": ["path"]`, 1))
	w.inbox.SetTamper(func(a *approver.Answer) {
		a.Edits = append(a.Edits, approver.Edit{Name: "path", Value: json.RawMessage(`"/srv/prod/authorized_keys"`)})
	})

	p.propose("p-3", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-3", "open")))
	do(t, alice, "approve", chromedp.Click(card("p-3", "open")+`//button[normalize-space()="Approve"]`))
	poll.Until(t, "the forgery", func() bool { return len(w.forgeries()) == 1 })
	if f := w.forgeries()[0]; f.Approver != "alice" || f.ProposalID != "p-3" {
		t.Fatalf("forgery event %+v", f)
	}
	// The tampered answer did go out, with the server's path in it.
	rid := w.requestOf(t, "p-3")
	answer := w.wire.WaitFor(t, "alice's answer", func(env agent.Envelope) bool {
		return env.From == "alice" && env.Kind == agent.KindResponse && env.CorrelationID.First() == rid
	})
	if !strings.Contains(string(answer.Payload), `"path":"/srv/prod/authorized_keys"`) {
		t.Fatalf("the answer sent %s, want the server's edit in it", answer.Payload)
	}
	if n := w.fulfilments("p-3"); n != 0 {
		t.Fatalf("%d fulfilments of an approval whose call the server changed", n)
	}
	for _, env := range w.wire.Envelopes() {
		if strings.Contains(string(env.Payload), `"tools/call"`) && strings.Contains(string(env.Payload), "authorized_keys") && env.From == "fulfiller" {
			t.Fatalf("the changed call went out: %s", env.Raw)
		}
	}
}

// TestTeamInboxReEnrolmentAndSignOut (issue 41, row 7): alice's lost phone
// is signed in; she enrols a new one, and the lost phone's page shows the
// sign-in form, her cards gone, within its next refresh. On the new phone
// Sign out does the same.
func TestTeamInboxReEnrolmentAndSignOut(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	lost := browserTab(t)
	w.enrol(t, lost, "alice")
	do(t, lost, "the sign-out button", chromedp.WaitVisible(`//button[@id="logout-button" and normalize-space()="Sign out"]`))

	phone := browserTab(t)
	w.enrol(t, phone, "alice")
	do(t, lost, "the lost phone signed out", chromedp.WaitVisible(`//input[@id="login-id"]`),
		chromedp.WaitNotVisible(`//button[@id="logout-button"]`))
	if who := get(t, lost, "who", chromedp.Text(`//span[@id="who"]`)); who != "" {
		t.Errorf("the lost phone still names %q", who)
	}

	do(t, phone, "sign out", chromedp.Click(`//button[@id="logout-button"]`),
		chromedp.WaitVisible(`//input[@id="login-id"]`),
		chromedp.WaitVisible(`//p[@id="status" and normalize-space()="Signed out."]`))
}

// TestTeamInboxEnrolPageAndConsole (issue 42): the enrolment page names
// the approver its link enrols before anything is pressed; a used link
// says so at once, with the sign-in form and no Enrol button; and from
// the first load to signed in, signed out and the used link, the browser
// console shows no error: no 401 from asking for cards before sign-in,
// no 404 favicon.
func TestTeamInboxEnrolPageAndConsole(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	alice := browserTab(t)
	consoleErrors := browsertest.ConsoleErrors(alice)

	do(t, alice, "the page before anyone enrolled", chromedp.Navigate(w.origin+"/"),
		chromedp.WaitVisible(`//input[@id="login-id"]`))
	token, err := teaminbox.CreateEnrolment(w.dir, "alice", 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	link := w.origin + "/enrol#" + token
	do(t, alice, "open the link", chromedp.Navigate(link),
		chromedp.WaitVisible(`//button[normalize-space()="Enrol passkey"]`))
	const wantText = "Enrol a passkey for alice. You will use it to sign in and to sign each approval."
	if got := get(t, alice, "the enrol text", chromedp.Text(`//section[@id="enrol"]/p`)); got != wantText {
		t.Errorf("enrol page says %q, want %q", got, wantText)
	}
	do(t, alice, "enrol", chromedp.Click(`//button[normalize-space()="Enrol passkey"]`),
		chromedp.WaitVisible(`//span[@id="who" and normalize-space()="alice"]`),
		chromedp.Click(`//button[@id="logout-button"]`),
		chromedp.WaitVisible(`//p[@id="status" and normalize-space()="Signed out."]`))

	if errs := consoleErrors(); len(errs) != 0 {
		t.Errorf("the console showed errors before sign-in and at enrolment:\n%s", strings.Join(errs, "\n"))
	}

	// The used link, opened again: it says so before any button.
	do(t, alice, "the used link", chromedp.Navigate(link),
		chromedp.WaitVisible(`//input[@id="login-id"]`),
		chromedp.WaitVisible(`//p[@id="status" and starts-with(normalize-space(), "This enrolment link no longer works")]`))
	if visible := get(t, alice, "the enrol button", chromedp.Evaluate[bool](`!document.getElementById("enrol").hidden`, chromedp.EvalAsValue)); visible {
		t.Error("a used link still shows the Enrol button")
	}
	// Sign in again with the passkey: the cards come, still no error.
	do(t, alice, "sign in", chromedp.SendKeys(`//input[@id="login-id"]`, "alice"),
		chromedp.Click(`//button[@id="login-button"]`),
		chromedp.WaitVisible(`//span[@id="who" and normalize-space()="alice"]`),
		chromedp.WaitVisible(`//section[@id="cards"]/p[normalize-space()="Nothing waits for you."]`))
	if errs := consoleErrors(); len(errs) != 0 {
		t.Errorf("the console showed errors:\n%s", strings.Join(errs, "\n"))
	}
}

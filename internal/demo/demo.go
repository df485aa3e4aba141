// Package demo runs the whole fulfiller story on one machine: an in-process
// MEW space, three tool servers, scripted proposers, and the real fulfiller
// (agent, policy engine with the example policies, lifecycle) — and narrates
// each proposal's journey to its outcome. It backs `fulfiller demo`.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/examples"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/sidecar"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
	"sigs.k8s.io/yaml"
)

// Options configure a demo run.
type Options struct {
	Out    io.Writer    // narration; default os.Stdout
	Color  bool         // ANSI colours in the narration
	Logger *slog.Logger // component logs; default: discarded
	// Ops is the fulfiller's decision log and operations listener
	// (demo --http, --decision-log), as run's.
	Ops sidecar.OpsConfig
	// Observer, when set, also sees every lifecycle event.
	Observer fulfill.Observer
	// ApprovalObserver, when set, also sees every elicitation event.
	ApprovalObserver func(elicit.Event)
	// Started, when set, is called once the fulfiller runs, with its
	// live parts.
	Started func(Running)
	// Hold keeps the space and the fulfiller up after the story until ctx
	// ends, so that /metrics and the operator API can be looked at.
	Hold bool
	// Step is how long to wait for one proposal's outcome.
	Step time.Duration
	// Approver, when set, is the person at the terminal: they answer as
	// oncall-alice with this UI (the approve card) instead of the
	// simulated alice, and the steps that wait for them accept whatever
	// they decide.
	Approver approver.UI
	// ApproverCards is how many cards Approver shows at once
	// (approver.Options.Open): 1 for the terminal card, more for the
	// browser inbox.
	ApproverCards int
	// ApproverURL is where the person answers when it is not this
	// terminal (the inbox page of demo --web); the header names it.
	ApproverURL string
	// PolicyTimeout bounds one evaluation [1s: a walkthrough on whatever
	// machine a newcomer has, not run's 100ms]. Tests under -race beside
	// other packages give it longer.
	PolicyTimeout time.Duration
}

// Running is the demo's live fulfiller, for Options.Started.
type Running struct {
	Gateway   *agent.Client
	Policy    *policies.Engine
	Fulfiller *fulfill.Fulfiller
	Grants    *grantstore.Registry
	// Sidecar is the whole fulfiller: its store, metrics and operations
	// address.
	Sidecar *sidecar.Sidecar
}

// Capabilities of the demo's participants, as a space.yaml would grant them.
var (
	capsFulfiller = []agent.Capability{{Kind: "mcp/*"}, {Kind: "chat"}}
	capsProposer  = []agent.Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}}
	capsTool      = []agent.Capability{{Kind: "mcp/response"}, {Kind: "chat"}}
	// A tool owner whose tools run as MCP tasks may also send status
	// notifications (mcp/request notifications/*), nothing else.
	capsTaskOwner = append(capsTool, agent.Capability{Kind: "mcp/request", Payload: map[string]any{"method": "notifications/*"}})
	capsHuman     = []agent.Capability{{Kind: "mcp/response"}, {Kind: "chat"}}
)

// The example policy's production approvers (examples/policies/data.yaml)
// who are in the demo's space; oncall-carol is away, so she is skipped.
const (
	alice = "oncall-alice"
	bob   = "oncall-bob"
	// lead is the second tier of the paged target (pagedTarget): asked
	// when the on-call approvers have not answered in time.
	lead = "oncall-lead"
)

// pagedTarget is the demo's addition to the example data (a demo-only
// override of settings.production.targets; docs/policies.md, "Reminders
// and escalation tiers"):
// calls under /srv/prod/payments/ remind the on-call approvers after 1s
// and ask oncall-lead after 2s — seconds, not the minutes an operator
// would choose, so that the story stays short.
var pagedTarget = map[string]any{
	"contains":    "payments",
	"pattern":     "^/srv/prod/payments/",
	"reminders":   []string{"1s"},
	"escalate_to": []map[string]any{{"after": "2s", "approvers": []string{lead}}},
}

// Run plays the story and returns nil when every step ended as the example
// policies say it should.
// ToolMetadata is what the demo's operator declares about the tools of
// fs, which answers as mew bridge does and so sends no annotations
// (fulfiller run --tool-metadata; docs/operations.md "Tool metadata"):
// without it the example policies would take every fs tool for a
// destructive one, as MCP's defaults say.
const ToolMetadata = `fs:
  read_file:   {annotations: {readOnlyHint: true}}
  list_dir:    {annotations: {readOnlyHint: true}}
  write_file:  {annotations: {readOnlyHint: false, destructiveHint: false}}
  delete_path: {annotations: {readOnlyHint: false, destructiveHint: true}}
`

// ErrStopped is what Run returns when the story was stopped before its
// end: the person quit at the approval card (q, ctrl-C), or ctx ended
// (an interrupt). The command exits cleanly on it.
var ErrStopped = errors.New("demo stopped before the story ended")

func Run(ctx context.Context, opts Options) error {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Step <= 0 {
		opts.Step = 10 * time.Second
	}
	if opts.PolicyTimeout <= 0 {
		opts.PolicyTimeout = time.Second
	}
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// stopped is closed when the person quits at the card; the story
	// then ends where it is, as on an interrupt.
	stopped := make(chan struct{})
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { close(stopped); cancel() }) }

	dir, err := os.MkdirTemp("", "fulfiller-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	policyDir, dataFile, err := examples.Write(dir)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if dataFile, err = pageTarget(dataFile); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// The approvers are reached through a signed webhook too, as run
	// --notify would: the receiver is the demo's, on loopback.
	hook, err := startReceiver()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer hook.close()
	target, err := notify.ParseTarget(hook.url, notify.Options{Secret: hook.secret})
	if err != nil {
		return fmt.Errorf("demo: --notify %w", err)
	}
	srv, err := space.New(space.Config{Logger: opts.Logger, Tokens: map[string][]agent.Capability{
		"fulfiller-token": capsFulfiller,
		"coder-token":     capsProposer,
		"mallory-token":   capsProposer,
		"tool-token":      capsTool,
		"jobs-token":      capsTaskOwner,
		"human-token":     capsHuman,
	}})
	if err != nil {
		return fmt.Errorf("demo: start space: %w", err)
	}
	defer srv.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	join := func(id, token string) (*agent.Client, error) {
		c, err := agent.Dial(ctx, agent.Config{URL: srv.URL(), ID: id, Token: token, Logger: opts.Logger})
		if err != nil {
			return nil, fmt.Errorf("demo: %s joins: %w", id, err)
		}
		return c, nil
	}

	files := toolserver.NewFiles(map[string]string{
		"/srv/app/config.yaml":           "listen: :8080\nlog: info\n",
		"/srv/prod/db/users":             "alice\nbob\n",
		"/srv/prod/logs/app.log":         "12:00 started\n",
		"/srv/prod/logs/error.log":       "12:01 disk 91% full\n",
		"/srv/prod/logs/debug.log":       "12:02 cache warm\n",
		"/srv/prod/payments/limits.yaml": "daily: 10000\n",
	})
	// fs answers as mew bridge does in front of an MCP server (the
	// reference SDK's way: no JSON-RPC id in its answers, no annotations
	// in its tools/list), the others as MCP servers that echo ids.
	for _, ts := range []struct {
		id, token string
		tools     []toolserver.Tool
		style     toolserver.Style
	}{{"calculator", "tool-token", toolserver.Calculator(), toolserver.StyleJSONRPC}, {"fs", "tool-token", files.Tools(), toolserver.StyleSDK},
		{"jobs", "jobs-token", toolserver.Jobs{Step: 100 * time.Millisecond}.Tools(), toolserver.StyleJSONRPC}} {
		c, err := join(ts.id, ts.token)
		if err != nil {
			return err
		}
		defer c.Close()
		sub := c.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindRequest}})
		server := toolserver.New(c, opts.Logger, ts.tools...)
		server.SetStyle(ts.style)
		wg.Add(1)
		go func() { defer wg.Done(); _ = server.Serve(ctx, sub.C()) }()
	}

	// The approvers join before the fulfiller, so it never waits on
	// their (empty) tools/list.
	for _, id := range []string{alice, bob, lead} {
		c, err := join(id, "human-token")
		if err != nil {
			return err
		}
		defer c.Close()
		var ui approver.UI = simulated(id)
		cards := 1
		if id == alice && opts.Approver != nil {
			ui, cards = noPresence{opts.Approver}, opts.ApproverCards
		}
		sub := c.Subscribe(approver.SubscribeOptions())
		a := approver.New(c, ui, approver.Options{Logger: opts.Logger, Open: cards})
		person := id == alice && opts.Approver != nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			_ = a.Run(ctx, sub.C())
			if person && ctx.Err() == nil {
				stop() // the person quit: nobody is left to answer their cards
			}
		}()
	}

	n := newNarrator(opts.Out, opts.Color)
	// The fulfiller is the sidecar `fulfiller run` starts, wired by the
	// same package, with a memory store as run --state memory: seen ids,
	// claims, records and grants go through the store as they do for an
	// operator. fs's annotations come from a tool metadata file, as
	// --tool-metadata gives them.
	metaFile := filepath.Join(dir, "tool-metadata.yaml")
	if err := os.WriteFile(metaFile, []byte(ToolMetadata), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	obs := fulfill.Observers{n}
	if opts.Observer != nil {
		obs = append(obs, opts.Observer)
	}
	sc, err := sidecar.New(sidecar.Config{
		Gateway: srv.URL(), Space: space.DefaultSpaceID, Token: "fulfiller-token", ID: "fulfiller",
		// A second per evaluation by default, not run's 100ms: the story
		// is a walkthrough on whatever machine a newcomer has, and a busy
		// one must not turn a step into a fail-closed reject.
		Policy:       policies.Options{Policies: []string{policyDir}, Data: []string{dataFile}, Timeout: opts.PolicyTimeout},
		ToolMetadata: metaFile,
		State:        &sidecar.StateConfig{Mode: state.Mode{Kind: state.Memory}},
		// As run's --status-chats (on by default): proposers hear when
		// theirs waits for humans, a fulfilment slot or a task.
		Fulfill:  fulfill.Config{StatusChats: true},
		Ops:      opts.Ops,
		Notify:   []notify.Target{target},
		Observer: obs,
		ApprovalObserver: func(e elicit.Event) {
			n.ObserveApproval(e)
			if opts.ApprovalObserver != nil {
				opts.ApprovalObserver(e)
			}
		},
		Logger: opts.Logger,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := sc.Start(ctx); err != nil {
		return fmt.Errorf("demo: start the fulfiller: %w", err)
	}
	// Stopped before the approvers, tools and space (deferred after
	// them): it answers what is pending while they are still there.
	defer func() { _ = sc.Stop() }()
	// The receiver closes after the fulfiller (deferred before it): the
	// last prompt.ended reaches it.
	engine, ful, reg := sc.Policy(), sc.Fulfiller(), sc.Grants()

	if opts.Started != nil {
		opts.Started(Running{Gateway: sc.Client(), Policy: engine, Fulfiller: ful, Grants: reg, Sidecar: sc})
	}
	if err := waitTools(ctx, ful, 8); err != nil {
		return err
	}

	proposers := map[string]*proposer.Proposer{}
	for _, id := range []string{"coder", "mallory"} {
		c, err := join(id, id+"-token")
		if err != nil {
			return err
		}
		defer c.Close()
		p := proposer.New(c)
		sub := c.Subscribe(agent.SubscribeOptions{All: true})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for env := range sub.C() {
				p.Observe(env)
			}
		}()
		proposers[id] = p
	}

	n.header(srv.URL(), engine.Revision(), ful.Tools(), map[string]string{"fs": "answers as mew bridge does: no JSON-RPC ids, no annotations (declared by the operator's --tool-metadata)"}, opts.Approver != nil, opts.ApproverURL)
	var results []result
	for i, s := range script() {
		if ctx.Err() != nil {
			break
		}
		if opts.Approver != nil && s.human {
			s.want, s.title = wantHuman, s.yours
		}
		if s.revokeGrants {
			revokeAll(ctx, reg, n)
		}
		r := play(ctx, i+1, s, proposers[s.from], n, hook, opts.Step, opts.Approver != nil)
		results = append(results, r)
	}
	if ctx.Err() != nil {
		select {
		case <-stopped:
		default:
			if outer.Err() == nil {
				return ctx.Err()
			}
		}
		n.note(fmt.Sprintf("stopped after %d of %d steps", max(len(results)-1, 0), len(script())))
		return ErrStopped
	}
	n.summary(results)
	if opts.Hold {
		fmt.Fprintln(opts.Out, "holding the space open (--hold); interrupt to exit")
		// How to try `run` without MEW: this gateway, its space and the
		// demo fulfiller's token (fixed, above), with an id of its own.
		fmt.Fprintf(opts.Out, "try fulfiller run against this gateway, from the repository's root (a second fulfiller beside the demo's;\n"+
			"with a built binary, write fulfiller run for go run ./cmd/fulfiller run):\n"+
			"  FULFILLER_TOKEN=fulfiller-token go run ./cmd/fulfiller run --gateway %s --space %s --id fulfiller-2 --peer-fulfillers fulfiller "+
			"--policy examples/policies --data examples/policies/data.yaml --state memory --http 127.0.0.1:9465\n", srv.URL(), space.DefaultSpaceID)
		<-ctx.Done()
	}
	var failed []string
	for _, r := range results {
		if !r.ok {
			failed = append(failed, fmt.Sprintf("step %d (%s): want %s, got %s", r.n, r.step.title, r.step.want, r.got))
		}
	}
	if bad := hook.refused(); bad > 0 {
		failed = append(failed, fmt.Sprintf("%v (%d)", errUnverified, bad))
	}
	if len(failed) > 0 {
		return errors.New("demo: " + strings.Join(failed, "; "))
	}
	return nil
}

// revokeAll revokes every live grant, as an operator would, and says so.
func revokeAll(ctx context.Context, reg *grantstore.Registry, n *narrator) {
	for _, g := range reg.List() {
		if !g.Live(time.Now()) {
			continue
		}
		if _, err := reg.Revoke(ctx, g.ID); err != nil {
			n.note(fmt.Sprintf("could not revoke %s: %v", g.ID, err))
			continue
		}
		n.note(fmt.Sprintf("the operator revokes %s (%s): DELETE /v1/grants/%s", g.ID, g.Terms(), g.ID))
	}
}

func waitTools(ctx context.Context, ful *fulfill.Fulfiller, want int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(ful.Tools()) < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: the fulfiller discovered %d of %d tools", len(ful.Tools()), want)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// step is one scripted proposal and the outcome the example policies give.
type step struct {
	title   string
	from    string
	id      string   // proposal id; "" for a fresh one
	to      []string // addressed to; nil for broadcast
	payload string
	want    string // fulfilled, rejected:<reason>, withdrawn, ignored
	// withdraw: the proposer withdraws once the approvers were asked.
	withdraw bool
	// human: with --interactive the person at the terminal decides.
	human bool
	// yours is the title when the person decides: the scripted title
	// tells what the simulated approvers do, which the person may not.
	yours string
	// revokeGrants: before the proposal, the operator revokes every live
	// grant (as DELETE /v1/grants/ID or fulfiller grants revoke would).
	revokeGrants bool
}

// wantHuman accepts any answer: the person at the terminal decided.
const wantHuman = "your decision"

func script() []step {
	return []step{
		{title: "a read-only calculation", from: "coder", id: "demo-add", payload: call("add", `{"a":2,"b":40}`), want: "fulfilled"},
		{title: "reading a config file", from: "coder", payload: call("read_file", `{"path":"/srv/app/config.yaml"}`), want: "fulfilled"},
		{title: "writing outside production, which no rule allows", from: "coder", payload: call("write_file", `{"path":"/srv/app/notes.txt","content":"hi"}`), want: "rejected:policy"},
		{title: "deleting production data (destructive: two approvers)", from: "coder", payload: call("delete_path", `{"path":"/srv/prod/db"}`), want: "fulfilled", human: true,
			yours: "deleting production data (destructive: two approvers, you and oncall-bob)"},
		{title: "writing to production: an approver declines", from: "coder", payload: call("write_file", `{"path":"/srv/prod/motd","content":"down for maintenance"}`), want: "rejected:disagree", human: true,
			yours: "writing to production: oncall-bob declines at once, unless you answer first"},
		{title: "reading a production log: approved, and allowed for 1h", from: "coder", payload: call("read_file", `{"path":"/srv/prod/logs/app.log"}`), want: "fulfilled", human: true,
			yours: "reading a production log: you decide, and may allow reads like it for a while (l: approve and grant)"},
		{title: "the next production log read: the grant lets it through", from: "coder", payload: call("read_file", `{"path":"/srv/prod/logs/error.log"}`), want: "fulfilled", human: true,
			yours: "the next production log read: a grant you made lets it through; without one you are asked again"},
		{title: "after the operator revokes the grant, people are asked again", from: "coder", payload: call("read_file", `{"path":"/srv/prod/logs/debug.log"}`), want: "fulfilled", human: true, revokeGrants: true,
			yours: "after the operator revokes any grant, you are asked again"},
		{title: "withdrawn while the approvers are asked", from: "coder", payload: call("delete_path", `{"path":"/srv/prod/cache"}`), want: "withdrawn", withdraw: true, human: true,
			yours: "withdrawn while you and oncall-bob are asked: the proposer changes its mind after 3s, unless you decline first"},
		{title: "a read-only tool nobody offers", from: "coder", payload: call("list_users", `{}`), want: "rejected:incapable"},
		{title: "a blocklisted proposer", from: "mallory", payload: call("read_file", `{"path":"/srv/prod/db/users"}`), want: "rejected:policy"},
		{title: "a proposal without a method", from: "coder", payload: `{"params":{"name":"add"}}`, want: "rejected:invalid"},
		{title: "the first proposal's id again", from: "coder", id: "demo-add", payload: call("delete_path", `{"path":"/"}`), want: "ignored"},
		{title: "a database migration: run as an MCP task, followed to its end", from: "coder", payload: call("migrate", `{"steps":3}`), want: "fulfilled"},
		{title: "a payments change nobody on call answers: reminded, then escalated to oncall-lead", from: "coder", payload: call("write_file", `{"path":"/srv/prod/payments/limits.yaml","content":"daily: 20000\n"}`), want: "fulfilled", human: true,
			yours: "a payments change: you are reminded after 1s, and after 2s oncall-lead is asked too"},
	}
}

func call(tool, args string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
}

// result is how one step ended.
type result struct {
	n    int
	step step
	id   string
	got  string
	out  proposer.Outcome
	ok   bool
	// webhooks are the lines of what the webhook receiver verified for
	// this proposal, when it was escalated.
	webhooks []string
}

// webhooks waits for the notifications of an escalated proposal to end
// (prompt.ended) and describes what the receiver got.
func webhooks(ctx context.Context, nar *narrator, hook *receiver, id string) []string {
	if id == "" || !nar.opened(id) {
		return nil
	}
	var lines []string
	for _, ev := range hook.waitEnded(ctx, id) {
		lines = append(lines, describeWebhook(ev))
	}
	return lines
}

func play(ctx context.Context, n int, s step, p *proposer.Proposer, nar *narrator, hook *receiver, wait time.Duration, interactive bool) result {
	r := result{n: n, step: s}
	// show prints the step, with what the webhook receiver got for it.
	show := func(ctx context.Context, r result, events []fulfill.Event) {
		r.webhooks = webhooks(ctx, nar, hook, r.id)
		nar.step(r, events)
	}
	var to []string
	if len(s.to) > 0 {
		to = s.to
	}
	id := s.id
	if id == "" {
		id = fmt.Sprintf("demo-%d-%s", n, toolName(s.payload))
	}
	id, err := p.Propose(ctx, id, to, json.RawMessage(s.payload))
	r.id = id
	if err != nil {
		r.got = "not sent: " + err.Error()
		show(ctx, r, nil)
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.want == "ignored" {
		// Nothing may answer a replayed id: wait for the fulfiller to note
		// it, then give a wrong answer the chance to show up.
		nar.waitStage(ctx, id, fulfill.StageIgnored)
		time.Sleep(200 * time.Millisecond)
		events := nar.take(id)
		r.got = "ignored"
		for _, e := range events {
			if e.Stage != fulfill.StageIgnored {
				r.got = string(e.Stage)
			}
		}
		r.ok = r.got == s.want && len(events) > 0
		show(ctx, r, events)
		return r
	}
	if s.withdraw {
		// Once both approvers have the prompt, the proposer changes its
		// mind: the fulfiller must cancel the prompts still open and
		// answer nothing.
		nar.waitApprovals(ctx, id, elicit.EventAsked, 2)
		if interactive {
			// Give the person a moment to see the card. They may answer
			// it meanwhile: an approval (one of the two needed) leaves
			// only oncall-bob's prompt to cancel; a decline ends the
			// proposal before there is anything to withdraw.
			pause, cancel := context.WithTimeout(ctx, 3*time.Second)
			nar.waitTerminal(pause, id)
			cancel()
		}
		if !nar.ended(id) {
			if err := p.Withdraw(ctx, id, "no_longer_needed"); err != nil {
				r.got = "withdrawal not sent: " + err.Error()
				show(ctx, r, nar.take(id))
				return r
			}
		}
		nar.waitTerminal(ctx, id)
		// The escalation's end is announced after every prompt still open
		// was cancelled: however many the person left open, this is when
		// the step is over (waiting for two cancels stalled the step to
		// its timeout when the person had answered one prompt already).
		nar.waitApprovals(ctx, id, elicit.EventEnded, 1)
		r.got = nar.outcome(id)
		r.ok = r.got == s.want || (s.want == wantHuman && nar.ended(id))
		show(ctx, r, nar.take(id))
		return r
	}
	out, err := p.Wait(ctx, id)
	r.out = out
	switch {
	case err != nil:
		r.got = "no answer (" + err.Error() + ")"
	case out.Fulfilled:
		r.got = "fulfilled"
	case out.Rejected:
		r.got = "rejected:" + out.Reason
		r.out.Chat = p.WaitChat(ctx, id)
	}
	nar.waitTerminal(ctx, id)
	r.ok = r.got == s.want || (s.want == wantHuman && err == nil)
	show(ctx, r, nar.take(id))
	return r
}

// pageTarget writes the example data with pagedTarget added to the
// production targets, beside dataFile, and returns its path: the example
// policy's behaviour for users stays as data.yaml says.
func pageTarget(dataFile string) (string, error) {
	raw, err := os.ReadFile(dataFile)
	if err != nil {
		return "", err
	}
	var data struct {
		Settings map[string]any `json:"settings"`
	}
	if err := yaml.Unmarshal(raw, &data); err != nil {
		return "", fmt.Errorf("%s: %w", dataFile, err)
	}
	prod, ok := data.Settings["production"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("%s: no settings.production", dataFile)
	}
	targets, _ := prod["targets"].([]any)
	prod["targets"] = append(targets, pagedTarget)
	out, err := json.Marshal(map[string]any{"settings": data.Settings})
	if err != nil {
		return "", err
	}
	paged := filepath.Join(filepath.Dir(dataFile), "data-paged.json")
	if err := os.WriteFile(paged, out, 0o600); err != nil {
		return "", err
	}
	return paged, nil
}

package fulfill_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// rpcIDOf returns the JSON-RPC id of a request envelope as written.
func rpcIDOf(t *testing.T, env agent.Envelope) string {
	t.Helper()
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil || len(p.ID) == 0 {
		t.Fatalf("no JSON-RPC id in %s", env.Raw)
	}
	return string(p.ID)
}

// On shutdown, a fulfilment still running is cancelled at its tool owner
// (notifications/cancelled naming our request) and its proposer gets
// reject "other" with the explanation: no response will come.
func TestShutdownCancelsRunningFulfilmentAtTheOwner(t *testing.T) {
	// Not parallel: the gateway's outage must come before a timeout
	// of seconds, which beside the package's parallel tests on a loaded
	// 2-core machine it did not (1 run of 5).
	w := newWorld(t, worldOptions{cfg: fulfill.Config{FulfillTimeout: never}})
	id := w.propose("p-sleep", `{"method":"tools/call","params":{"name":"sleep","arguments":{}}}`)
	req := w.onWire("the fulfilment request", func(e agent.Envelope) bool {
		return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == id
	})
	w.stopFulfiller()

	cancel := w.onWire("the cancellation", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.CorrelationID.First() == req.ID
	})
	exact(t, cancel, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+rpcIDOf(t, req)+`,"reason":"shutdown"}}}`)
	out := w.outcome(id)
	if !out.Rejected || out.Reason != "other" {
		t.Fatalf("outcome %+v", out)
	}
	if chat := waitChat(t, w.prop, id); chat != "fulfiller is shutting down; the call was cancelled at calculator" {
		t.Errorf("chat %q", chat)
	}
	if owed, lost := w.ful.ShutdownAnswers(); owed != 1 || lost != 0 {
		t.Errorf("shutdown answers owed %d, lost %d; want 1, 0", owed, lost)
	}
}

// restartable is a space that can go down and come back on the same
// address, with a fulfiller, a tool owner and a proposer in it.
type restartable struct {
	t     *testing.T
	cfg   space.Config
	srv   *space.Server
	wire  *spacetest.Wire
	fc    *agent.Client
	calc  *agent.Client
	prop  *agent.Client
	ful   *fulfill.Fulfiller
	down  time.Time
	ready chan struct{}
}

func newRestartable(t *testing.T, fulCfg fulfill.Config, tune func(*agent.Config)) *restartable {
	t.Helper()
	r := &restartable{t: t, cfg: space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": capsFulfiller, "coder-token": capsProposer, "calc-token": capsTool,
	}}}
	r.start()
	ctx := context.Background()
	join := func(id, token string, tune func(*agent.Config)) *agent.Client {
		cfg := agent.Config{ID: id, Token: token}
		spacetest.Resilient(&cfg)
		if tune != nil {
			tune(&cfg)
		}
		return spacetest.JoinWith(t, ctx, r.srv, cfg)
	}
	r.calc = join("calculator", "calc-token", nil)
	spacetest.ServeTools(t, r.calc, toolserver.Tool{Name: "sleep", Description: "Never answers until cancelled",
		Call: func(ctx context.Context, _ json.RawMessage) (string, error) { <-ctx.Done(); return "", ctx.Err() }})
	r.fc = join("fulfiller", "fulfiller-token", tune)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(e2ePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	fulCfg.SpaceID = space.DefaultSpaceID
	r.ful = fulfill.New(r.fc, engine, fulCfg)
	sub := r.fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.ful.Run(fctx, sub.C()) }()
	t.Cleanup(func() { stop(); <-done })
	poll.Until(t, "tool discovery", func() bool { return len(r.ful.Tools()) == 1 })
	r.prop = join("coder", "coder-token", nil)
	return r
}

// start starts the space, on the address of the previous one if any.
func (r *restartable) start() {
	r.t.Helper()
	if r.srv != nil {
		r.cfg.Addr = strings.TrimPrefix(r.srv.URL(), "ws://")
	}
	srv, err := space.New(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { srv.Close() })
	r.srv, r.wire = srv, spacetest.RecordWire(r.t, srv)
}

// stop takes the space down: every socket closes and nobody can join.
func (r *restartable) stop() {
	r.t.Helper()
	r.srv.Close()
	r.down = time.Now()
	poll.Until(r.t, "the fulfiller to lose its session", func() bool { return !r.fc.Connected() })
}

// A fulfilment times out while the fulfiller's link is down: its
// notifications/cancelled cannot be written then, so it is kept and sent
// as soon as the fulfiller is back, with the same envelope.
func TestCancellationLostInOutageIsSentAfterReconnect(t *testing.T) {
	// Not parallel: the gateway's outage must come before a timeout
	// of seconds, which beside the package's parallel tests on a loaded
	// 2-core machine it did not (1 run of 5).
	// The timeout must fire during the outage: the space goes down a few
	// milliseconds after the request, two seconds before the timeout.
	r := newRestartable(t, fulfill.Config{FulfillTimeout: 2 * time.Second, OwnerRejoinGrace: never}, nil)
	const raw = `{"protocol":"mew/v0.4","id":"p-sleep","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"sleep","arguments":{}}}}`
	var env agent.Envelope
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		t.Fatal(err)
	}
	if _, err := r.prop.Send(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	req := r.wire.WaitFor(t, "the fulfilment request", func(e agent.Envelope) bool {
		return e.Kind == agent.KindRequest && e.From == "fulfiller" && e.CorrelationID.First() == "p-sleep"
	})
	r.stop()
	poll.Until(t, "the cancellation to be kept for later", func() bool { return r.fc.Stats().Queued == 1 })
	for _, e := range r.wire.Envelopes() {
		if e.CorrelationID.First() == req.ID {
			t.Fatalf("the cancellation went out before the outage: %s", e.Raw)
		}
	}

	r.start()
	cancel := r.wire.WaitFor(t, "the cancellation after the reconnect", func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.CorrelationID.First() == req.ID
	})
	exact(t, cancel, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["calculator"],"kind":"mcp/request","correlation_id":["`+req.ID+`"],"payload":{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+rpcIDOf(t, req)+`,"reason":"timeout"}}}`)
	rej := r.wire.WaitFor(t, "the reject", func(e agent.Envelope) bool { return e.Kind == agent.KindReject && e.CorrelationID.First() == "p-sleep" })
	exact(t, rej, `{"protocol":"mew/v0.4","id":"*","ts":"*","from":"fulfiller","to":["coder"],"kind":"mcp/reject","correlation_id":["p-sleep"],"payload":{"reason":"timeout"}}`)
	// The space can hand the re-sent frame on before the agent counts
	// its write: wait for the count, as a reader of the stats would.
	poll.Until(t, "the kept cancellation counted as re-sent", func() bool { return r.fc.Stats().Resent == 1 && r.fc.Queued() == 0 })
	if st := r.fc.Stats(); st.Resent != 1 {
		t.Errorf("stats %+v: want the one kept cancellation re-sent once", st)
	}
}

// The gateway restarts after a 1.5s outage (the case). With the
// longest waits the jitter allows, the fulfiller must be back by the first
// attempt the schedule makes after the space is up again (a loaded machine
// that oversleeps makes fewer): for an outage under 2.125s, by the sixth
// attempt, 2.125s after the loss. The old schedule (200ms doubling) had
// waited 3s by its first attempt after such an outage at best, and 5.3s in
// the field.
func TestReconnectSoonAfterGatewayRestart(t *testing.T) {
	// Not parallel: the gateway's outage must come before a timeout
	// of seconds, which beside the package's parallel tests on a loaded
	// 2-core machine it did not (1 run of 5).
	r := newRestartable(t, fulfill.Config{}, func(c *agent.Config) {
		c.BackoffMin, c.BackoffMax = 0, 0 // the defaults
		c.Jitter = func() float64 { return 1 }
	})
	r.stop()
	time.Sleep(1500 * time.Millisecond) // the outage, not an assertion
	r.start()
	outage := time.Since(r.down)
	poll.Until(t, "the fulfiller to rejoin", func() bool { return r.fc.Connected() })

	attempts := int(r.fc.Stats().ReconnectAttempts)
	delay := func(n int) time.Duration {
		return agent.ReconnectDelay(n, agent.DefaultBackoffMin, agent.DefaultBackoffMax, 1)
	}
	var at time.Duration
	first := 0 // the first attempt the schedule makes after the outage
	for at < outage {
		at += delay(first)
		first++
	}
	if attempts < 1 || attempts > first {
		t.Fatalf("rejoined at attempt %d after a %s outage; the schedule's first attempt after it is %d", attempts, outage, first)
	}
	if outage < 2125*time.Millisecond && attempts > 6 {
		t.Fatalf("rejoined at attempt %d after a %s outage, want by the sixth", attempts, outage)
	}
	// And the fulfiller works again.
	if _, err := r.prop.Send(context.Background(), agent.Envelope{ID: "p-after", Kind: agent.KindProposal, Payload: json.RawMessage(`{"method":"tools/call","params":{"name":"delete_path"}}`)}); err != nil {
		t.Fatal(err)
	}
	r.wire.WaitFor(t, "the reject after the restart", func(e agent.Envelope) bool {
		return e.Kind == agent.KindReject && e.CorrelationID.First() == "p-after"
	})
}

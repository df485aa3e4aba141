package approver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

func TestMain(m *testing.M) {
	// Twice GOMAXPROCS tests at once: they mostly wait, each on a
	// world of its own.
	testenv.MoreParallel()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"))
}

const policy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

decision := object.union(data.escalation, {"action": "escalate"}) if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
	not granted
}

# A grant an approver made lets the write through without asking.
decision := {"action": "fulfill"} if {
	input.tool.name == "write_file"
	startswith(input.tool.arguments.path, "/srv/prod/")
	granted
}

granted if count(input.grants) > 0

decision := {"action": "reject", "reason": "policy", "message": "writes stay under /srv/prod"} if {
	input.tool.name == "write_file"
	not startswith(input.tool.arguments.path, "/srv/prod/")
}
`

const writeCall = `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}}`

// world is a space with a file server, the real fulfiller and its codec,
// a proposer, and approvers that run approver.Client with a given UI.
type world struct {
	t     *testing.T
	ctx   context.Context
	srv   *space.Server
	prop  *proposer.Proposer
	files *toolserver.Files
	ful   *fulfill.Fulfiller
	bobGo chan struct{} // closed to let bob answer, in tests that have him
	wg    *sync.WaitGroup
	wire  *spacetest.Wire
}

func newWorld(t *testing.T, escalation string, keys approval.Keys) *world {
	t.Helper()
	return newWorldGrants(t, escalation, keys, false)
}

// newWorldGrants is newWorld whose fulfiller offers and honours grants
// (in memory) when offerGrants is set.
func newWorldGrants(t *testing.T, escalation string, keys approval.Keys, offerGrants bool) *world {
	t.Helper()
	return newWorldConfig(t, escalation, elicit.Config{Keys: keys, OfferGrants: offerGrants})
}

// newWorldConfig is newWorld whose escalations run as cfg says (approver keys, a
// prompt key, grants).
func newWorldConfig(t *testing.T, escalation string, cfg elicit.Config) *world {
	t.Helper()
	offerGrants := cfg.OfferGrants
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{
		"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
		"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
		"tool-token":      {{Kind: "mcp/response"}, {Kind: "chat"}},
		"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
		// mallory may send requests (as a tool owner or an agent with
		// tools may), and writes them in others' names: the gateway does
		// not authenticate from.
		"mallory-token": {{Kind: "mcp/request"}, {Kind: "chat"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, ctx: ctx, srv: srv, wg: &sync.WaitGroup{}, wire: spacetest.RecordWire(t, srv)}
	t.Cleanup(func() {
		cancel()
		w.wg.Wait()
		srv.Close()
	})
	w.files = toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	spacetest.ServeTools(t, w.join("fs", "tool-token"), w.files.Tools()...)

	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "p.rego"), []byte(policy), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "d.json"), []byte(`{"escalation":`+escalation+`}`), 0o644)
	// A minute, not the 100 ms default: these tests assert decisions, and
	// under -race on a loaded machine a slow evaluation would fail closed.
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{filepath.Join(dir, "p.rego")}, Data: []string{filepath.Join(dir, "d.json")}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fc := w.join("fulfiller", "fulfiller-token")
	var reg *grantstore.Registry
	if offerGrants {
		reg = grantstore.NewRegistry(nil, nil)
	}
	// DiscoverySettle: nobody in these worlds forges a tools/list
	// answer (fulfill's tests cover that), and the 500 ms default would
	// be waited out by every world before its first proposal.
	ful := fulfill.New(fc, engine, fulfill.Config{SpaceID: space.DefaultSpaceID, Approvals: cfg.Approvals("fulfiller"), Approvers: cfg.DefaultApprovers, Grants: reg, DiscoverySettle: time.Millisecond})
	w.ful = ful
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	fctx, fcancel := context.WithCancel(ctx)
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = ful.Run(fctx, fulSub.C()) }()
	t.Cleanup(func() {
		fcancel()
		<-fulDone
	})
	poll.Until(t, "tool discovery", func() bool { return len(ful.Tools()) == 4 })
	w.prop = spacetest.NewProposer(t, w.join("coder", "coder-token"))
	return w
}

func (w *world) join(id, token string) *agent.Client {
	w.t.Helper()
	return spacetest.Join(w.t, w.ctx, w.srv, id, token)
}

// approver joins as id and runs an approver.Client with ui until the test
// ends; the returned channel is closed when Run returns.
func (w *world) approver(id string, ui approver.UI, opts approver.Options) <-chan struct{} {
	c := w.join(id, "human-token")
	sub := c.Subscribe(approver.SubscribeOptions())
	done := make(chan struct{})
	client := approver.New(c, ui, opts)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(done)
		defer sub.Close()
		_ = client.Run(w.ctx, sub.C())
	}()
	return done
}

func (w *world) propose(id string) string {
	w.t.Helper()
	return w.proposeCall(id, writeCall)
}

func (w *world) proposeCall(id, call string) string {
	w.t.Helper()
	id, err := w.prop.Propose(w.ctx, id, nil, json.RawMessage(call))
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) outcome(id string) proposer.Outcome {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	out, err := w.prop.Wait(ctx, id)
	if err != nil {
		w.t.Fatalf("proposal %s: %v", id, err)
	}
	return out
}

func (w *world) chat(id string) string {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	return w.prop.WaitChat(ctx, id)
}

// find waits for an envelope on the wire.
func (w *world) find(what string, pred func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.wire.WaitFor(w.t, what, pred)
}

// screen collects what a UI writes, safe to read while it is written.
type screen = spacetest.Screen

// waitFor waits until the screen shows text.
var waitFor = spacetest.WaitText

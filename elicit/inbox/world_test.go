package inbox_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/proposer"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// policy escalates production writes (data.escalation says to whom; a
// path in data.timeouts gets its own deadline) and rejects writes anywhere
// else, so that an edit moving a write out of /srv/prod is refused when
// the policy checks the edited call again.
const policy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "not allowed"}

escalation := object.union(data.escalation, {"timeout": data.timeouts[input.tool.arguments.path]}) if {
	data.timeouts[input.tool.arguments.path]
} else := data.escalation

decision := object.union(escalation, {"action": "escalate"}) if {
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

const alone = `{"approvers":["alice"],"message":"production writes need a human","editable":["path","content"]}`

// world is a space with a file server, the real fulfiller and its codec, a
// proposer, and alice's approver client with the inbox as its face,
// served over HTTP as `fulfiller approve --web` serves it.
type world struct {
	t     *testing.T
	ctx   context.Context
	srv   *space.Server
	prop  *proposer.Proposer
	ful   *fulfill.Fulfiller
	wire  *spacetest.Wire
	inbox *inbox.Inbox
	web   *httptest.Server
	// humans are the other approvers' sessions (worldOptions.humans),
	// which a test answers through by hand.
	humans map[string]*agent.Client
}

type worldOptions struct {
	escalation string
	timeouts   string             // JSON object: path → the deadline of its escalation
	keys       approval.Keys      // the fulfiller's approver keys
	key        ed25519.PrivateKey // alice's
	humans     []string           // others in the space (as plain participants)
	grants     bool               // the fulfiller offers and honours grants
}

func newWorld(t *testing.T, o worldOptions) *world {
	t.Helper()
	if o.escalation == "" {
		o.escalation = alone
	}
	if o.timeouts == "" {
		o.timeouts = "{}"
	}
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
	var wg sync.WaitGroup
	w := &world{t: t, ctx: ctx, srv: srv, wire: spacetest.RecordWire(t, srv)}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		srv.Close()
	})
	files := toolserver.NewFiles(map[string]string{"/srv/prod/motd": "hello"})
	spacetest.ServeTools(t, w.join("fs", "tool-token"), files.Tools()...)

	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "p.rego"), []byte(policy), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "d.json"), []byte(`{"escalation":`+o.escalation+`,"timeouts":`+o.timeouts+`}`), 0o644)
	engine, err := policies.Load(ctx, policies.Options{Timeout: time.Minute, Policies: []string{filepath.Join(dir, "p.rego")}, Data: []string{filepath.Join(dir, "d.json")}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fc := w.join("fulfiller", "fulfiller-token")
	var reg *grantstore.Registry
	if o.grants {
		reg = grantstore.NewRegistry(nil, nil)
	}
	// DiscoverySettle: nobody in these worlds forges a tools/list
	// answer (fulfill's tests cover that), and the 500 ms default would
	// be waited out by every world before its first proposal.
	w.ful = fulfill.New(fc, engine, fulfill.Config{SpaceID: space.DefaultSpaceID, Approvals: elicit.Config{Keys: o.keys, OfferGrants: o.grants}.Approvals("fulfiller"), Grants: reg, DiscoverySettle: time.Millisecond})
	fulSub := fc.Subscribe(agent.SubscribeOptions{All: true})
	fulDone := make(chan struct{})
	go func() { defer close(fulDone); _ = w.ful.Run(ctx, fulSub.C()) }()
	t.Cleanup(func() {
		cancel()
		<-fulDone
	})
	poll.Until(t, "tool discovery", func() bool { return len(w.ful.Tools()) == 4 })
	w.humans = map[string]*agent.Client{}
	for _, h := range o.humans {
		w.humans[h] = w.join(h, "human-token")
	}

	// Alice: the approver client with the inbox as its UI, as `fulfiller
	// approve --web` wires it.
	signing := ""
	if o.key != nil {
		signing = "answers are signed"
	}
	w.inbox, err = inbox.New(inbox.Options{Approver: "alice", Signing: signing, Fulfillers: []string{"fulfiller"}})
	if err != nil {
		t.Fatal(err)
	}
	w.web = httptest.NewServer(w.inbox.Handler())
	t.Cleanup(func() {
		w.inbox.Close()
		w.web.Close()
	})
	ac := w.join("alice", "human-token")
	sub := ac.Subscribe(approver.SubscribeOptions())
	client := approver.New(ac, w.inbox, approver.Options{Key: o.key, Open: 64})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sub.Close()
		_ = client.Run(ctx, sub.C())
	}()
	w.prop = spacetest.NewProposer(t, w.join("coder", "coder-token"))
	return w
}

func (w *world) join(id, token string) *agent.Client {
	w.t.Helper()
	return spacetest.Join(w.t, w.ctx, w.srv, id, token)
}

// pageURL is the address the inbox prints: the secret in the query.
func (w *world) pageURL() string { return w.web.URL + "/?token=" + w.inbox.Secret() }

// propose sends a write_file call of path.
func (w *world) propose(id, path string) string {
	w.t.Helper()
	call, _ := json.Marshal(map[string]any{"method": "tools/call", "params": map[string]any{"name": "write_file", "arguments": map[string]any{"path": path, "content": "hi"}}})
	id, err := w.prop.Propose(w.ctx, id, nil, call)
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *world) outcome(id string) proposer.Outcome {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	out, err := w.prop.Wait(ctx, id)
	if err != nil {
		w.t.Fatalf("proposal %s: %v", id, err)
	}
	return out
}

func (w *world) chat(id string) string {
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	return w.prop.WaitChat(ctx, id)
}

// find waits for an envelope on the wire.
func (w *world) find(what string, pred func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.wire.WaitFor(w.t, what, pred)
}

// fulfilments are the fulfiller's tools/call requests for proposal id.
func (w *world) fulfilments(id string) []agent.Envelope {
	var out []agent.Envelope
	for _, e := range w.wire.Envelopes() {
		if e.From == "fulfiller" && e.Kind == agent.KindRequest && e.CorrelationID.First() == id && strings.Contains(string(e.Payload), `"tools/call"`) {
			out = append(out, e)
		}
	}
	return out
}

// elicitation waits for the prompt to approver about proposal id that
// satisfies more (nil: any).
func (w *world) elicitation(approver, id string, more func(agent.Envelope) bool) agent.Envelope {
	w.t.Helper()
	return w.find("the prompt to "+approver+" about "+id, func(e agent.Envelope) bool {
		return e.From == "fulfiller" && e.Kind == agent.KindRequest && len(e.To) == 1 && e.To[0] == approver &&
			strings.Contains(string(e.Payload), `"elicitation/create"`) && strings.Contains(string(e.Payload), `"id":"`+id+`"`) &&
			(more == nil || more(e))
	})
}

package mcpserve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit/approval/approverkeys"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/passkeytest"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/toolserver"
	"github.com/mewkit/fulfiller/policies"
)

// cutProxy forwards TCP to a NATS server until cut: an instance
// connected through it loses the cluster as a killed process does
// (nothing it still holds in memory reaches the store).
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			p.mu.Lock()
			if err != nil || p.cut {
				p.mu.Unlock()
				_ = c.Close()
				if up != nil {
					_ = up.Close()
				}
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(p.Cut)
	return p
}

// Cut closes the proxy and every connection through it.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// inboxInstance is an instance with the team inbox hosted in-process,
// alice enrolled there with a passkey of its own, deciding with
// alicePolicy, its decision log in Log.
type inboxInstance struct {
	*instance
	inbox string
	alice *passkeytest.Passkey
	Log   string
}

func startInboxInstance(t *testing.T, m state.Mode, runs *atomic.Int32, tune ...func(*mcpserve.Config)) *inboxInstance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "inbox")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	policy := writePolicy(t, alicePolicy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &inboxInstance{inbox: "http://" + ln.Addr().String(), Log: filepath.Join(tmp, "decisions.jsonl")}
	origin := passkeytest.Origin(t, in.inbox)
	in.alice = passkeytest.New(t, "localhost", origin)
	in.alice.Enrol(t, dir, "alice")
	keys, err := approverkeys.Open(filepath.Join(dir, teaminbox.PasskeysFile), approverkeys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := teaminbox.New(teaminbox.Options{Dir: dir, RPID: "localhost", Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	tools := toolserver.NewMCP(&mcp.Implementation{Name: "tables", Version: "1.0"}, tablesTool("Drop a table", runs))
	var sessions sync.WaitGroup
	up := mcpfront.Upstream{Name: "tables", What: "the test's tables server", Transport: func() (mcp.Transport, error) {
		client, side := mcp.NewInMemoryTransports()
		ss, err := tools.Connect(ctx, side, nil)
		if err != nil {
			return nil, err
		}
		sessions.Go(func() { _ = ss.Wait() })
		return client, nil
	}}
	cfg := mcpserve.Config{
		Upstreams: []mcpfront.Upstream{up}, State: m, DecisionLog: in.Log,
		Policy: policies.Options{Policies: []string{policy}, Timeout: time.Minute},
		Keys:   keys, Inbox: inbox, InboxListener: ln, ApprovalTimeout: time.Minute, ShutdownTimeout: 2 * time.Second,
	}
	for _, f := range tune {
		f(&cfg)
	}
	srv, err := mcpserve.Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := srv.Front().Ready(ctx, "tables"); err != nil {
		cancel()
		_ = srv.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler(mcpfront.HTTPOptions{}))
	in.instance = &instance{srv: srv, url: hs.URL + "/mcp/tables"}
	var once sync.Once
	in.stop = func() {
		once.Do(func() {
			hs.CloseClientConnections()
			hs.Close()
			_ = srv.Close()
			cancel()
			sessions.Wait()
		})
	}
	// killHTTP drops the clients as a killed process does.
	in.killHTTP = func() { hs.CloseClientConnections(); hs.Close() }
	t.Cleanup(in.stop)
	return in
}

// waitStage waits until the decision log at path has a line of
// proposal id at stage: the engine writes a call's last line once the
// client has its answer.
func waitStage(t *testing.T, path, id, stage string) {
	t.Helper()
	poll.Until(t, "the "+stage+" line of "+id, func() bool {
		for _, l := range logLines(t, path) {
			if l["proposal_id"] == id && l["stage"] == stage {
				return true
			}
		}
		return false
	})
}

// logLines reads a decision log's lines.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("decision log line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// callAsync calls drop(table) on cs in the background.
func callAsync(cs *mcp.ClientSession, table string) <-chan *mcp.CallToolResult {
	out := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "drop", Arguments: map[string]any{"table": table}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		out <- res
	}()
	return out
}

// TestRetryReattachesAfterInstanceDies: a drop is held on instance A
// for alice; A dies (its cluster connection and its clients cut, as a
// kill does); the client's retry of the same call reaches B, which
// finds the held call in the cluster and takes it over: no new
// decision, alice is asked again on B's inbox (the same proposal), and
// on her approval the drop runs exactly once and the retry gets its
// result. A retry of another call (other arguments) is a new call.
func TestRetryReattachesAfterInstanceDies(t *testing.T) {
	t.Parallel()
	m := natsCluster(t)
	proxy := newCutProxy(t, m.URLs[0][len("nats://"):])
	var runs atomic.Int32
	a := startInboxInstance(t, state.Mode{Kind: state.External, URLs: []string{"nats://" + proxy.ln.Addr().String()}}, &runs)
	b := startInboxInstance(t, m, &runs)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := state.Open(ctx, state.Config{Mode: m, Space: mcpserve.StoreSpace, Member: "test-reader"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	index, err := st.HeldCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}

	c1 := connect(t, a.url, nil)
	first := callAsync(c1.cs, "users")
	var held string
	poll.Until(t, "the drop held on A for alice, and indexed in the cluster", func() bool {
		ps := a.srv.Engine().Pending()
		if len(ps) != 1 || ps[0].State != "awaiting_approval" {
			return false
		}
		key := mcpserve.CallKey(mcpfront.Proposal{Proposer: "local", Server: "tables",
			Tool: mcpfront.Tool{Name: "drop", Arguments: json.RawMessage(`{"table":"users"}`)}})
		c, ok, err := index.Get(ctx, key, time.Now())
		held = ps[0].ID
		return err == nil && ok && c.ProposalID == held
	})

	// A dies: its cluster connection, then its clients.
	proxy.Cut()
	a.killHTTP()
	if res := <-first; !res.IsError {
		t.Fatalf("the first call, on the killed instance: %q; want it failed", text(res))
	}

	c2 := connect(t, b.url, nil)
	retry := callAsync(c2.cs, "users")
	poll.Until(t, "B holds the same proposal", func() bool {
		ps := b.srv.Engine().Pending()
		return len(ps) == 1 && ps[0].ID == held && ps[0].State == "awaiting_approval"
	})
	poll.Until(t, "alice connected to B's inbox", func() bool { return b.srv.Approvers().Connected("alice") })
	s := passkeytest.SignIn(t, b.inbox, "alice", b.alice)
	req := s.OpenCard()
	select {
	case res := <-retry:
		t.Fatalf("the retry was answered before alice: %q", text(res))
	default:
	}
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval on B: %d %s", code, msg)
	}
	if res := <-retry; res.IsError || text(res) != "dropped users" {
		t.Fatalf("the retry after alice's approval: isError %v %q; want the upstream's \"dropped users\"", res.IsError, text(res))
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the upstream ran the drop %d times; want exactly 1", n)
	}

	// B made no decision of its own: its lines are the held proposal's,
	// resumed, approved and fulfilled; A's log has its decision.
	waitStage(t, b.Log, held, "fulfilled")
	stages := map[string]bool{}
	for _, l := range logLines(t, b.Log) {
		if id, _ := l["proposal_id"].(string); id != "" && id != held {
			t.Errorf("B's decision log has a line of another proposal %s: %v", id, l)
		}
		if st, _ := l["stage"].(string); st != "" {
			stages[st] = true
		}
	}
	if stages["decided"] || !stages["approved"] || !stages["fulfilled"] {
		t.Errorf("B's decision log stages %v: want approved and fulfilled, and no decision", stages)
	}
	decidedOnA := false
	for _, l := range logLines(t, a.Log) {
		if l["proposal_id"] == held && l["stage"] == "decided" {
			decidedOnA = true
		}
	}
	if !decidedOnA {
		t.Errorf("A's decision log has no decided line of %s", held)
	}

	// Another call (other arguments) is a new proposal.
	other := callAsync(c2.cs, "orders")
	poll.Until(t, "a new proposal for another call", func() bool {
		ps := b.srv.Engine().Pending()
		return len(ps) == 1 && ps[0].ID != held
	})
	req = s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "decline"}); code != 200 {
		t.Fatalf("alice's decline: %d %s", code, msg)
	}
	if res := <-other; !res.IsError || text(res) != "fulfiller refused this call (disagree): alice declined" {
		t.Errorf("the other call after alice's decline: isError %v %q", res.IsError, text(res))
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the upstream ran %d drops; want 1", n)
	}
}

// callerPolicy asks the person at the client about every drop.
const callerPolicy = `package fulfiller

default decision := {"action": "reject", "reason": "policy", "message": "no rule allows this"}

decision := {"action": "escalate", "approvers": ["@caller"], "message": "a drop needs you"} if input.tool.name == "drop"
`

// TestRetryAsksTheCallerOnItsNewSession: @caller's prompt belongs to
// the session that made the call. The call is held on A, asking the
// caller there; the client's connection is lost and its retry, on a new
// session, reaches B (A stays up, and its session never learns of the
// loss: Streamable HTTP sessions outlive connections). B takes the held
// proposal from A, which lets it go, and asks the caller again on the retry's session, the
// one that can answer; the approved drop runs once. The old request is
// answered that its call was taken over, and the old form's late answer
// counts for nothing.
func TestRetryAsksTheCallerOnItsNewSession(t *testing.T) {
	t.Parallel()
	m := natsCluster(t)
	policy := writePolicy(t, callerPolicy)
	var runs atomic.Int32
	a := startInstance(t, m, policy, "Drop a table", &runs)
	b := startInstance(t, m, policy, "Drop a table", &runs)

	// The old client's form stays open until the test closes it: the
	// go-sdk client reads nothing else of that session meanwhile.
	asked, closeForm := make(chan struct{}, 1), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(ectx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked <- struct{}{}
			select { // the person never answers here
			case <-ectx.Done():
				return nil, ectx.Err()
			case <-closeForm:
				return &mcp.ElicitResult{Action: "cancel"}, nil
			}
		}}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	first := callAsync(old, "users")
	<-asked
	ps := a.srv.Engine().Pending()
	if len(ps) != 1 || ps[0].State != "awaiting_approval" {
		t.Fatalf("A's pending calls: %+v; want the drop awaiting approval", ps)
	}
	held := ps[0].ID

	c := connect(t, b.url, &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}})
	res := c.drop(t, "users")
	if res.IsError || text(res) != "dropped users" || c.asked.Load() != 1 {
		t.Fatalf("the retry on B: isError %v %q after %d prompts; want it run after the caller's 1", res.IsError, text(res), c.asked.Load())
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the upstream ran the drop %d times; want 1", n)
	}
	// The same proposal, not a new one: A let it go to B, which
	// decided nothing and fulfilled it.
	poll.Until(t, "A no longer holds the proposal", func() bool { return !heldOn(a, held) })
	waitStage(t, b.log, held, "fulfilled")
	close(closeForm)
	// The old request, should its client still read it, is told where
	// its answer went: it does not wait for ever.
	select {
	case res := <-first:
		if want := "fulfiller refused this call (other): this call was taken over by its retry on another fulfiller instance; the answer goes to the retry"; !res.IsError || text(res) != want {
			t.Errorf("the old request on A: isError %v %q; want %q", res.IsError, text(res), want)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the old request on A was not answered once B took its call over")
	}
	stages := map[string]bool{}
	for _, l := range logLines(t, b.log) {
		if id, _ := l["proposal_id"].(string); id != "" && id != held {
			t.Errorf("B's decision log has a line of another proposal %s: %v", id, l)
		}
		if st, _ := l["stage"].(string); st != "" {
			stages[st] = true
		}
	}
	if stages["decided"] || !stages["approved"] || !stages["fulfilled"] {
		t.Errorf("B's decision log stages %v: want approved and fulfilled, and no decision", stages)
	}
}

// heldOn reports whether in's engine holds proposal id.
func heldOn(in *instance, id string) bool {
	for _, p := range in.srv.Engine().Pending() {
		if p.ID == id {
			return true
		}
	}
	return false
}

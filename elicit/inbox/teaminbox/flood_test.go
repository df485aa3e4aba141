package teaminbox

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// nullConn is alice's connection: it sends nothing anywhere.
type nullConn struct{}

func (nullConn) ID() string { return "alice" }
func (nullConn) Send(_ context.Context, env agent.Envelope) (agent.Envelope, error) {
	return env, nil
}

// floodPrompt is an elicitation/create to alice in the fulfiller's name,
// envelope id id, about a write of path, its message padded to size
// bytes; with key, signed as --prompt-key signs it.
func floodPrompt(t testing.TB, id, path string, size int, key ed25519.PrivateKey) agent.Envelope {
	call := `{"name":"write_file","arguments":{"path":"` + path + `"}}`
	digest, err := approval.CallDigest("tools/call", json.RawMessage(call))
	if err != nil {
		t.Fatal(err)
	}
	rpcID := `"` + id + `"`
	params := `{"message":"` + strings.Repeat("x", size) + `","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},` +
		`"_meta":{"proposal":{"id":"p-` + id + `","from":"coder","method":"tools/call","params":` + call + `,"digest":"` + digest + `","deadline":"2999-01-01T00:00:00Z"}}}`
	if key != nil {
		sig, err := approval.SignPrompt(key, id, json.RawMessage(rpcID), "alice", digest, json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		params = strings.Replace(params, `"_meta":{`, `"_meta":{"fulfiller/signature":{"signer":"fulfiller","signature":"`+sig+`"},`, 1)
	}
	return agent.Envelope{Protocol: "mew/v0.4", ID: id, From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + rpcID + `,"method":"elicitation/create","params":` + params + `}`)}
}

// flood runs alice's team inbox face (UI) under an approver.Client with
// opts, as inbox serve does (Open: 64), hands it n forged prompts of size
// bytes and then the real one (signed with key when key is set), and
// returns the UI once the client has handled them all.
func flood(t testing.TB, opts approver.Options, n, size int, key ed25519.PrivateKey) *UI {
	u := &UI{approver: "alice", cards: map[string]*entry{}}
	c := approver.New(nullConn{}, u, opts)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(ctx, in) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		in <- floodPrompt(t, fmt.Sprintf("forged-%d", i), "/tmp/forged", size, nil)
	}
	in <- floodPrompt(t, "real", "/srv/prod/motd", 100, key)
	// One more envelope: the client has handled the real prompt once it
	// takes this one.
	in <- agent.Envelope{From: "someone", Kind: agent.KindChat, Payload: json.RawMessage(`{"text":"hi"}`)}
	return u
}

// realShown waits (briefly: Ask runs in a goroutine) for the real prompt
// to be open on the page.
func realShown(u *UI) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range u.view() {
			if v.Request == "real" && v.State == "open" {
				return true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func openCards(u *UI) int {
	n := 0
	for _, v := range u.view() {
		if v.State == "open" {
			n++
		}
	}
	return n
}

// TestForgedPromptFloodIsBounded (issue 41, row 2): forged
// elicitation/create prompts flooded an approver's team inbox: its memory
// grew without bound, the 64 visible cards filled with forgeries and a
// real prompt sent later never showed. Each approver's prompts are now a
// bounded queue, by count and by bytes, whose oldest cards make room; the
// real prompt is visible on the page.
func TestForgedPromptFloodIsBounded(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		u := flood(t, approver.Options{Open: 64}, 300, 1024, nil)
		if !realShown(u) {
			t.Fatalf("the real prompt is not on the page after 300 forgeries (%d cards open)", openCards(u))
		}
		if n := openCards(u); n > 64 {
			t.Errorf("%d cards open, want at most 64", n)
		}
		displaced := 0
		for _, v := range u.view() {
			if v.State == "ended" && strings.HasPrefix(v.Status, "dropped: more prompts came at once than this client holds") {
				displaced++
			}
		}
		if displaced == 0 {
			t.Errorf("no card says it was dropped to make room:\n%+v", u.view()[0])
		}
	})
	t.Run("bytes", func(t *testing.T) {
		u := flood(t, approver.Options{Open: 64, MaxCardBytes: 64 << 10}, 50, 8<<10, nil)
		if !realShown(u) {
			t.Fatalf("the real prompt is not on the page (%d cards open)", openCards(u))
		}
		if n := openCards(u); n > 8 {
			t.Errorf("%d cards of 8 KiB open under a 64 KiB bound", n)
		}
	})
	t.Run("signed prompts", func(t *testing.T) {
		pub, key, _ := ed25519.GenerateKey(nil)
		u := flood(t, approver.Options{Open: 64, FulfillerKeys: approval.Keys{"fulfiller": pub}}, 300, 1024, key)
		if !realShown(u) {
			t.Fatal("the real signed prompt is not on the page")
		}
		if views := u.view(); len(views) != 1 {
			t.Errorf("%d cards on the page, want the real one alone: unsigned prompts take no place", len(views))
		}
	})
}

// TestForgedPromptFloodMemory measures what the red team measured: the
// approver's heap after 5 000 forged prompts of 100 KiB (and a real one),
// logged for docs/limits.md and the report. Not with -short.
func TestForgedPromptFloodMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("5 000 × 100 KiB prompts; not with -short")
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	u := flood(t, approver.Options{Open: 64}, 5000, 100<<10, nil)
	after := heap()
	t.Logf("heap in use: %.1f MiB before, %.1f MiB after 5000 forged prompts of 100 KiB; real prompt on the page: %v; %d cards open",
		float64(before)/(1<<20), float64(after)/(1<<20), realShown(u), openCards(u))
	if after-before > 64<<20 {
		t.Errorf("the flood kept %.1f MiB", float64(after-before)/(1<<20))
	}
}

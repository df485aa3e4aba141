package loadtest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// A fulfilled proposal whose tool does not answer in time is rejected
// "timeout" after its fulfilment request (docs/design.md rule 4): the bench
// counts that apart, as a slow tool, while any other second answer is a
// duplicate, named by what it was.
func TestObserveCountsFulfilTimeoutsApartFromDuplicates(t *testing.T) {
	n := 3
	tk := &tracker{
		start:    time.Now(),
		window:   make(chan struct{}, n),
		sent:     make([]atomic.Int64, n),
		answers:  make([]atomic.Int32, n),
		released: make([]atomic.Bool, n),
	}
	for seq := range n {
		tk.window <- struct{}{}
		tk.sent[seq].Store(1)
		tk.nSent.Add(1)
	}
	r := &receiver{prefix: "b-0-p", outcomes: map[string]int64{}, requests: map[string]int{}, fulfilling: map[int]string{}}
	frame := func(kind, id, corr, extra string) []byte {
		return fmt.Appendf(nil, `{"protocol":"mew/v0.4","id":"%s","ts":"x","from":"fulfiller","to":["b-0"],"kind":"%s","correlation_id":["%s"],"payload":{%s}}`, id, kind, corr, extra)
	}
	// 0: fulfilled, then timed out.
	r.observe(tk, frame("mcp/request", "req-0", "b-0-p0", `"method":"tools/call"`))
	r.observe(tk, frame("mcp/reject", "rej-0", "b-0-p0", `"reason":"timeout"`))
	// 1: fulfilled, answered by the tool, then a stray second reject.
	r.observe(tk, frame("mcp/request", "req-1", "b-0-p1", `"method":"tools/call"`))
	r.observe(tk, frame("mcp/response", "resp-1", "req-1", `"result":{}`))
	r.observe(tk, frame("mcp/reject", "rej-1", "b-0-p1", `"reason":"timeout"`))
	// 2: rejected twice.
	r.observe(tk, frame("mcp/reject", "rej-2", "b-0-p2", `"reason":"busy"`))
	r.observe(tk, frame("mcp/reject", "rej-2b", "b-0-p2", `"reason":"busy"`))

	if r.fulfilTimeouts != 1 {
		t.Errorf("fulfil timeouts %d, want 1", r.fulfilTimeouts)
	}
	if got := tk.nDup.Load(); got != 2 {
		t.Errorf("duplicates %d, want 2", got)
	}
	if r.dups["rejected:timeout"] != 1 || r.dups["rejected:busy"] != 1 {
		t.Errorf("duplicate kinds %v, want one rejected:timeout and one rejected:busy", r.dups)
	}
	if tk.nAnswered.Load() != 3 || len(tk.window) != 0 {
		t.Errorf("answered %d, window holds %d; want 3 answered and every place given back", tk.nAnswered.Load(), len(tk.window))
	}
}

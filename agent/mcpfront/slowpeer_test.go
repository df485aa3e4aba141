package mcpfront

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The Front against peers that stop reading: its writes are made on the
// engine's goroutine (the fake engine carries its effects out on its
// own, as the engine's Loop does), so a write that blocked would stop
// every call.

// scriptedUpstream answers initialize and tools/list from in, and hands
// each tools/call to call, on the reading goroutine: while call runs,
// the upstream reads nothing.
func scriptedUpstream(t *testing.T, in io.Reader, out io.Writer, call func(m rawFrame, send func(string))) {
	var mu sync.Mutex
	send := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(out, s+"\n")
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var m rawFrame
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			// The last frame to a peer given up on may be cut short; a
			// frame cut anywhere else leaves its call unanswered, and the
			// test fails waiting for it.
			t.Logf("the upstream read %.80q: %v", sc.Text(), err)
			continue
		}
		switch {
		case m.Method == "initialize":
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"raw","version":"1"}}}`, m.ID))
		case m.Method == "tools/list":
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`, m.ID))
		case m.Method == "tools/call":
			call(m, send)
		case len(m.ID) > 0:
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID))
		}
	}
}

// newSlowPeerRig is a wireRig whose upstream is scriptedUpstream on OS
// pipes (the Front's writes to it take deadlines, as to a command's
// stdin), with call as its tools/call.
func newSlowPeerRig(t *testing.T, call func(m rawFrame, send func(string))) *wireRig {
	t.Helper()
	r, _ := newSlowPeerRigClient(t, call, false)
	return r
}

// newSlowPeerRigClient is newSlowPeerRig; with stalled, the client
// reads what the Front writes on an OS pipe (polled, as a pipe stdout
// is) only when the test reads the reader returned (r.lines is nil).
func newSlowPeerRigClient(t *testing.T, call func(m rawFrame, send func(string)), stalled bool) (*wireRig, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &wireRig{rig: &rig{t: t, ctx: ctx}}
	var mu sync.Mutex
	var files []*os.File
	var ups sync.WaitGroup
	up := Upstream{Name: "raw", What: "a scripted upstream", Transport: func() (mcp.Transport, error) {
		ur, fw, err := os.Pipe() // the upstream reads what the front writes
		if err != nil {
			return nil, err
		}
		fr, uw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		mu.Lock()
		files = append(files, ur, uw)
		mu.Unlock()
		ups.Go(func() { scriptedUpstream(t, ur, uw, call); _ = uw.Close() })
		return &mcp.IOTransport{Reader: fr, Writer: fw}, nil
	}}
	r.eng = newFakeEngine(map[string]string{"echo": "fulfil"})
	f, err := New(Config{Engine: r.eng}, up)
	if err != nil {
		t.Fatal(err)
	}
	r.start(f, "raw", 10*time.Second)
	var cr io.ReadCloser
	var fw io.WriteCloser
	if stalled {
		if cr, fw, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
	} else {
		cr, fw = io.Pipe()
	}
	fr, cw := io.Pipe()
	r.cw = cw
	r.served = make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.served <- f.ServeStdio(ctx, "raw", &mcp.IOTransport{Reader: fr, Writer: fw})
	}()
	var client *bufio.Reader
	if stalled {
		client = bufio.NewReaderSize(cr, 4<<20)
	} else {
		r.lines = lineChan(cr, 4<<20)
	}
	t.Cleanup(func() {
		cancel()
		cw.Close()
		fw.Close()
		cr.Close()
		r.wg.Wait()
		mu.Lock()
		for _, f := range files {
			f.Close() // ends an upstream that still reads
		}
		mu.Unlock()
		ups.Wait()
	})
	return r, client
}

// withLimits sets the wire's bounds for one test.
func withLimits(t *testing.T, l wireLimits) {
	old := defaultWireLimits
	defaultWireLimits = l
	t.Cleanup(func() { defaultWireLimits = old })
}

// bigCall is a client's tools/call of echo whose arguments are 16 KiB:
// four fill a pipe's buffer.
func bigCall(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"pad":%q}}}`, id, strings.Repeat("p", 16<<10))
}

// An upstream that reads its first call and then never reads again:
// the calls sent to it pile up past its pipe's buffer, its connection
// fails once it has read nothing for the stall bound, and every call,
// the one it took included, gets an error result that says so, once;
// none hangs, and the Front's goroutines all end.
func TestSlowPeerUpstreamNeverReads(t *testing.T) {
	withLimits(t, wireLimits{fast: 2 * time.Millisecond, stall: 300 * time.Millisecond, maxQueued: 32 << 20})
	release := make(chan struct{})
	defer close(release)
	r := newSlowPeerRig(t, func(rawFrame, func(string)) { <-release })
	r.initialize()
	const n = 12 // 192 KiB of calls for a 64 KiB buffer
	for i := 1; i <= n; i++ {
		r.send(bigCall(i))
	}
	got := map[string]bool{}
	for range n {
		f := r.next()
		if got[string(f.ID)] {
			t.Errorf("call %s answered twice", f.ID)
		}
		got[string(f.ID)] = true
		var res mcp.CallToolResult
		if f.Error != nil || json.Unmarshal(f.Result, &res) != nil || !res.IsError {
			t.Errorf("call %s: %s %+v, want an error result", f.ID, f.Result, f.Error)
			continue
		}
		if txt := text(&res); !strings.Contains(txt, "upstream raw failed during the call") || !strings.Contains(txt, errPeerStalled.Error()) {
			t.Errorf("call %s: %q, want the upstream's failure: it read nothing", f.ID, txt)
		}
	}
	if len(got) != n {
		t.Errorf("%d calls answered, want %d", len(got), n)
	}
}

// The deadlock a blocking write makes: an upstream that answers each
// call with a large result, then a large log message, before it reads
// on. While it writes, the engine's goroutine sends it more calls (its
// input fills), and the goroutine that reads it hands the engine the
// result (and waits for the engine); a write that blocked would leave
// all three waiting on each other for good. Every call is answered, in
// full.
func TestSlowPeerNoDeadlock(t *testing.T) {
	withLimits(t, wireLimits{fast: 2 * time.Millisecond, stall: time.Minute, maxQueued: 32 << 20})
	big := strings.Repeat("r", 256<<10)
	r := newSlowPeerRig(t, func(m rawFrame, send func(string)) {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID, big))
		send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%q}}`, big))
	})
	r.initialize()
	const n = 16
	for i := 1; i <= n; i++ {
		r.send(bigCall(i))
	}
	got := map[string]bool{}
	for range n {
		f := r.next()
		var res mcp.CallToolResult
		if f.Error != nil || json.Unmarshal(f.Result, &res) != nil || res.IsError || text(&res) != big {
			t.Errorf("call %s: %.100s %+v, want its 256 KiB result", f.ID, f.Result, f.Error)
		}
		got[string(f.ID)] = true
	}
	if len(got) != n {
		t.Errorf("%d calls answered, want %d", len(got), n)
	}
}

// A client that stops reading what fulfiller writes (a pipe, polled, as
// fulfiller's stdout is), while its calls' large results keep coming:
// the engine's goroutine, which writes them, is never stopped (the
// other calls all reach the upstream), and once the client has read
// nothing for the stall bound its session ends as if it had left, with
// why, and its calls still out are withdrawn as disconnected.
func TestSlowPeerClientNeverReads(t *testing.T) {
	withLimits(t, wireLimits{fast: 2 * time.Millisecond, stall: 300 * time.Millisecond, maxQueued: 32 << 20})
	big := strings.Repeat("r", 64<<10)
	var upCalls sync.WaitGroup
	const n = 12
	upCalls.Add(n + 1)
	hold := make(chan struct{})
	r, client := newSlowPeerRigClient(t, func(m rawFrame, send func(string)) {
		upCalls.Done()
		if strings.Contains(string(m.Params), `"hold"`) {
			go func() { <-hold }() // answered never: still out when the client is given up on
			return
		}
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID, big))
	}, true)
	defer close(hold)
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw-client","version":"1"}}}`)
	if l, err := client.ReadBytes('\n'); err != nil || !strings.Contains(string(l), `"id":0,"result"`) {
		t.Fatalf("initialize: %s %v", l, err)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.send(`{"jsonrpc":"2.0","id":100,"method":"tools/call","params":{"name":"echo","arguments":{"hold":true}}}`)
	for i := 1; i <= n; i++ { // 768 KiB of results the client never reads
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{}}}`, i))
	}
	reached := make(chan struct{})
	go func() { upCalls.Wait(); close(reached) }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the calls stopped reaching the upstream: the engine is blocked writing to the client")
	}
	select {
	case err := <-r.served:
		if !errors.Is(err, errPeerStalled) {
			t.Errorf("ServeStdio: %v, want the client's stall", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio still runs")
	}
	// The held call is withdrawn, and any whose result had not come yet;
	// as disconnected, each once.
	var held string
	for _, p := range r.eng.seen() {
		if string(p.RPCID) == "100" {
			held = p.ID
		}
	}
	withdrawn := func() bool {
		for _, w := range r.eng.withdrawn() {
			if w.ProposalID == held {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for !withdrawn() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	once := map[string]bool{}
	for _, w := range r.eng.withdrawn() {
		if w.Reason != WithdrawDisconnected || once[w.ProposalID] {
			t.Errorf("withdrawal %+v: want one, disconnected", w)
		}
		once[w.ProposalID] = true
	}
	if held == "" || !once[held] {
		t.Errorf("the held call (%q) was not withdrawn: %+v", held, r.eng.withdrawn())
	}
}

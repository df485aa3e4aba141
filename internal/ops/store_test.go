package ops_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mewkit/fulfiller/fulfill/state"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/poll"
)

// flakyStore is a Pinger whose answer the test sets.
type flakyStore struct {
	mu    sync.Mutex
	err   error
	pings int
}

func (f *flakyStore) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	return f.err
}

func (f *flakyStore) set(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func (f *flakyStore) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.pings }

// TestReadyzFollowsTheStoreProbe: /readyz is 503 until the store has
// been probed, 503 naming the store while its pings fail, and ready again
// once they succeed, without a restart; the failing gauge follows. The
// probe runs in the background: requests to /readyz do not ping.
func TestReadyzFollowsTheStoreProbe(t *testing.T) {
	fs := &flakyStore{}
	fs.set(errors.New("state: store connection reconnecting"))
	src := &ops.Source{}
	m := ops.NewMetrics(src)
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	src.SetPolicy(fakePolicy{})
	probe := ops.NewStoreProbe("nats://nats-0:4222,nats://nats-1:4222", fs, 20*time.Millisecond)
	src.SetStore(probe)
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Metrics: m}))
	defer hs.Close()

	ready := func() (int, string) { code, body := do(t, "GET", hs.URL+"/readyz", ""); return code, compact(t, body) }
	if code, body := ready(); code != 503 || body != `{"gateway":"connected","reason":"the state store (nats://nats-0:4222,nats://nats-1:4222) is not checked yet","revision":"sha256:abc","status":"not_ready","store":"failing"}` {
		t.Fatalf("before the first probe: %d %s", code, body)
	}
	if n := fs.count(); n != 0 {
		t.Fatalf("/readyz pinged the store %d times; only the probe may", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); probe.Run(ctx) }()
	defer func() { cancel(); <-done }()

	failing := `{"gateway":"connected","reason":"the state store (nats://nats-0:4222,nats://nats-1:4222) does not accept writes: state: store connection reconnecting","revision":"sha256:abc","status":"not_ready","store":"failing"}`
	poll.Until(t, "readyz naming the failing store", func() bool { code, body := ready(); return code == 503 && body == failing })
	if !strings.Contains(scrape(t, m), "fulfiller_state_store_failing 1\n") {
		t.Errorf("failing gauge not 1:\n%s", scrape(t, m))
	}
	fs.set(nil)
	poll.Until(t, "ready once the store takes writes", func() bool {
		code, body := ready()
		return code == 200 && body == `{"gateway":"connected","revision":"sha256:abc","status":"ready","store":"ok"}`
	})
	if !strings.Contains(scrape(t, m), "fulfiller_state_store_failing 0\n") {
		t.Errorf("failing gauge not 0:\n%s", scrape(t, m))
	}
	fs.set(errors.New("boom"))
	poll.Until(t, "unready again", func() bool { code, _ := ready(); return code == 503 })
}

// TestReadyzFollowsARealNATSServer: the probe over a real external store.
// Stopping its NATS server makes /readyz 503 naming the store; a server
// back on the same port and directory makes it ready again, the same
// Store reconnected, no restart.
func TestReadyzFollowsARealNATSServer(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	start := func() *server.Server {
		t.Helper()
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatal("nats-server did not start")
		}
		return ns
	}
	ns := start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()

	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	mode, err := state.ParseMode(url)
	if err != nil {
		t.Fatal(err)
	}
	src := &ops.Source{}
	m := ops.NewMetrics(src)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, err := state.Open(ctx, state.Config{Mode: mode, Space: "s", Member: "f1", Replicas: 1, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	src.SetPolicy(fakePolicy{})
	probe := ops.NewStoreProbe(mode.String(), store, 50*time.Millisecond)
	src.SetStore(probe)
	h := ops.NewHandler(ops.Options{Source: src, Metrics: m})
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); probe.Run(pctx) }()
	defer func() { stop(); <-done }()

	readiness := func() ops.Readiness { return h.Ready() }
	poll.Until(t, "ready", func() bool { return readiness().Status == "ready" })
	ns.Shutdown()
	ns.WaitForShutdown()
	poll.Until(t, "not ready with the server down", func() bool {
		r := readiness()
		return r.Status == "not_ready" && r.Store == "failing" && strings.HasPrefix(r.Reason, "the state store ("+url+") does not accept writes: ")
	})
	ns = start()
	poll.Until(t, "ready again with the server back", func() bool { return readiness().Status == "ready" })
	if out := scrape(t, m); !strings.Contains(out, `fulfiller_state_op_errors_total{op="ping"}`) {
		t.Errorf("failed pings not counted:\n%s", out)
	}
}

// TestMetricsFollowTheStore: the state store's observer calls move the
// metrics docs/operations.md lists, through a real (memory) store.
func TestMetricsFollowTheStore(t *testing.T) {
	m := ops.NewMetrics(&ops.Source{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := state.Open(ctx, state.Config{Mode: state.Mode{Kind: state.Memory}, Space: "s", Member: "f1", Lease: time.Second, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, want := range []bool{true, false} {
		won, err := store.Claim(ctx, "p-1")
		if err != nil || won != want {
			t.Fatalf("claim: %v %v, want %v", won, err, want)
		}
	}
	if err := store.Put(ctx, &lifecycle.Proposal{ID: "p-1"}); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, &lifecycle.Proposal{ID: "p-1"}); !errors.Is(err, state.ErrExists) {
		t.Fatalf("second put: %v", err)
	}
	leaseCtx, stopLease := context.WithCancel(ctx)
	if err := store.StartLease(leaseCtx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "a lease renewal", func() bool {
		return strings.Contains(scrape(t, m), `fulfiller_state_lease_renewals_total{result="ok"}`)
	})
	// A renewal slower than Lease/2 on a loaded machine is a real failure
	// and counts; once the lease's context is gone none is reported, so the
	// count moves by exactly the one reported here.
	stopLease()
	failedBefore := counter(scrape(t, m), `fulfiller_state_lease_renewals_total{result="failed"}`)
	m.LeaseRenewed(errors.New("lapsed"))
	m.Adopted("f2", 3)
	m.StoreOp("update", time.Millisecond, errors.New("nats: timeout"))

	out := scrape(t, m)
	for _, want := range []string{
		`fulfiller_state_claims_total{result="won"} 1` + "\n",
		`fulfiller_state_claims_total{result="lost"} 1` + "\n",
		`fulfiller_state_op_duration_seconds_count{op="claim"} 2` + "\n",
		`fulfiller_state_op_duration_seconds_count{op="put"} 2` + "\n",
		`fulfiller_state_adopted_records_total 3` + "\n",
		`fulfiller_state_op_errors_total{op="update"} 1` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if got := counter(out, `fulfiller_state_lease_renewals_total{result="failed"}`); got != failedBefore+1 {
		t.Errorf("failed renewals %d, want %d", got, failedBefore+1)
	}
	// A lost claim or an existing record is an outcome, not an error.
	if strings.Contains(out, `fulfiller_state_op_errors_total{op="put"}`) || strings.Contains(out, `fulfiller_state_op_errors_total{op="claim"}`) {
		t.Errorf("outcomes counted as errors:\n%s", out)
	}
}

// counter returns the value of the series named exactly by series in the
// /metrics text out, 0 when it is absent.
func counter(out, series string) int {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// scrape returns the /metrics text.
func scrape(t *testing.T, m *ops.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	ops.NewHandler(ops.Options{Metrics: m}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// grantsGate is a GrantsLoader the test opens.
type grantsGate struct{ ready chan struct{} }

func (g grantsGate) Ready() <-chan struct{} { return g.ready }

// TestReadyzWaitsForTheGrants: until the grants in the state store are
// loaded /readyz is 503 and says so (a decision would wait for them);
// then ready, with grants "loaded".
func TestReadyzWaitsForTheGrants(t *testing.T) {
	src := &ops.Source{}
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	src.SetPolicy(fakePolicy{})
	g := grantsGate{ready: make(chan struct{})}
	src.SetGrants(g)
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Metrics: ops.NewMetrics(src)}))
	defer hs.Close()
	code, body := do(t, "GET", hs.URL+"/readyz", "")
	if want := `{"gateway":"connected","grants":"loading","reason":"the grants in the state store are not loaded yet","revision":"sha256:abc","status":"not_ready"}`; code != 503 || compact(t, body) != want {
		t.Fatalf("while loading: %d %s, want 503 %s", code, compact(t, body), want)
	}
	close(g.ready)
	code, body = do(t, "GET", hs.URL+"/readyz", "")
	if want := `{"gateway":"connected","grants":"loaded","revision":"sha256:abc","status":"ready"}`; code != 200 || compact(t, body) != want {
		t.Fatalf("loaded: %d %s, want 200 %s", code, compact(t, body), want)
	}
}

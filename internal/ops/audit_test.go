package ops_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/mewkit/fulfiller/internal/ops"
)

// fakeAuditLog is a decision log that fails on demand.
type fakeAuditLog struct {
	mu       sync.Mutex
	err      error
	failures uint64
}

func (a *fakeAuditLog) Healthy() error        { a.mu.Lock(); defer a.mu.Unlock(); return a.err }
func (a *fakeAuditLog) WriteFailures() uint64 { a.mu.Lock(); defer a.mu.Unlock(); return a.failures }
func (a *fakeAuditLog) Dropped() uint64       { return 0 }

func (a *fakeAuditLog) set(err error, failures uint64) {
	a.mu.Lock()
	a.err, a.failures = err, failures
	a.mu.Unlock()
}

// TestReadyzAndMetricsFollowTheDecisionLog: a decision log that cannot be
// written makes /readyz 503 with the reason, and the failure metric
// counts; when it works again, ready again (the count stays).
func TestReadyzAndMetricsFollowTheDecisionLog(t *testing.T) {
	src := &ops.Source{}
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	src.SetPolicy(fakePolicy{})
	audit := &fakeAuditLog{}
	src.SetAuditLog(audit)
	m := ops.NewMetrics(src)
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Metrics: m}))
	defer hs.Close()
	check := func(wantCode int, want string) {
		t.Helper()
		code, body := do(t, "GET", hs.URL+"/readyz", "")
		if code != wantCode || compact(t, body) != want {
			t.Fatalf("readyz = %d %s, want %d %s", code, compact(t, body), wantCode, want)
		}
	}
	metric := func(want string) {
		t.Helper()
		rec := httptest.NewRecorder()
		ops.NewHandler(ops.Options{Source: src, Metrics: m}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		if !strings.Contains(string(body), want+"\n") {
			t.Fatalf("metrics lack %q", want)
		}
	}
	check(200, `{"decision_log":"ok","gateway":"connected","revision":"sha256:abc","status":"ready"}`)
	metric("fulfiller_decision_log_write_failures_total 0")

	audit.set(errors.New("decision log: write decisions.jsonl: no space left on device"), 3)
	check(503, `{"decision_log":"failing","gateway":"connected","reason":"the decision log cannot be written (decision log: write decisions.jsonl: no space left on device): fulfilments and escalations are refused","revision":"sha256:abc","status":"not_ready"}`)
	metric("fulfiller_decision_log_write_failures_total 3")
	metric("fulfiller_decision_log_failing 1")

	audit.set(nil, 3)
	check(200, `{"decision_log":"ok","gateway":"connected","revision":"sha256:abc","status":"ready"}`)
	metric("fulfiller_decision_log_failing 0")
}

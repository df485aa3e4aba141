package teaminbox

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// loginBegins sends n unauthenticated POST /api/login/begin for
// approver, as a flood would, and returns the ceremony id of the first
// and the rates (requests per second) of the first and last fifth.
func loginBegins(t testing.TB, s *Server, approver string, n int) (first string, early, late float64) {
	h := s.Handler()
	fifth := n / 5
	start := time.Now()
	var lateStart time.Time
	for i := range n {
		if i == n-fifth {
			lateStart = time.Now()
		}
		if i == fifth {
			early = float64(fifth) / time.Since(start).Seconds()
		}
		req := httptest.NewRequest(http.MethodPost, "/api/login/begin", strings.NewReader(`{"approver":"`+approver+`"}`))
		req.Header.Set("Origin", sessionOrigin)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("login begin %d: %d %s", i, rec.Code, rec.Body)
		}
		if i == 0 {
			var out struct{ Ceremony string }
			_ = json.Unmarshal(rec.Body.Bytes(), &out)
			first = out.Ceremony
		}
	}
	late = float64(fifth) / time.Since(lateStart).Seconds()
	return first, early, late
}

// TestLoginFloodKeepsNothing (issue 41, row 9): every unauthenticated
// /api/login/begin kept a challenge for 5 minutes, all scanned under one
// lock at each new one. A sign-in's challenge is now kept by no one but
// the browser (an authenticated ceremony id), so a flood costs no memory;
// a sign-in begun before the flood still finishes.
func TestLoginFloodKeepsNothing(t *testing.T) {
	dir := t.TempDir()
	if err := appendPasskey(dir, "alice", testPasskey(t, "alice")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Dir: dir, RPID: "localhost", Origin: sessionOrigin})
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := loginBegins(t, s, "alice", 5000)
	s.mu.Lock()
	held := len(s.ceremonies)
	s.mu.Unlock()
	if held > 0 {
		t.Errorf("%d ceremonies held after 5000 sign-in requests, want none", held)
	}
	c, err := s.takeCeremony(first, "login")
	if err != nil || c.approver != "alice" || c.challenge == "" {
		t.Fatalf("the first sign-in's ceremony after the flood: %+v %v", c, err)
	}
	// A ceremony id is good for one finish, of its kind, until it expires:
	// a sign-in's is spent once its passkey verified.
	if err := s.spendLogin(first, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.takeCeremony(first, "login"); err == nil {
		t.Error("a sign-in ceremony was taken after it was spent")
	}
	if err := s.spendLogin(first, c); err == nil {
		t.Error("a sign-in ceremony was spent twice")
	}
	second, _, _ := loginBegins(t, s, "alice", 1)
	if _, err := s.takeCeremony(second, "answer"); err == nil {
		t.Error("a sign-in ceremony was taken as an answer's")
	}
	tampered := second[:len(second)-2] + "AA"
	if _, err := s.takeCeremony(tampered, "login"); err == nil {
		t.Error("a tampered sign-in ceremony was taken")
	}
	s.opts.Now = func() time.Time { return time.Now().Add(ceremonyTTL) }
	if _, err := s.takeCeremony(second, "login"); err == nil {
		t.Error("an expired sign-in ceremony was taken")
	}
}

// TestLoginFloodFigures measures what the red team measured: 60 000
// sign-in requests, the heap they leave and the rate of the first and last
// fifth (through the handler, without a network). Not with -short.
func TestLoginFloodFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("60 000 requests; not with -short")
	}
	dir := t.TempDir()
	if err := appendPasskey(dir, "alice", testPasskey(t, "alice")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Dir: dir, RPID: "localhost", Origin: sessionOrigin})
	if err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	_, early, late := loginBegins(t, s, "alice", 60000)
	after := heap()
	runtime.KeepAlive(s)
	t.Logf("60000 /api/login/begin: heap in use %.1f -> %.1f MiB; %.0f req/s over the first 12000, %.0f req/s over the last 12000",
		float64(before)/(1<<20), float64(after)/(1<<20), early, late)
}

package ops_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mewkit/fulfiller/internal/ops"
)

// TestOperatorAPIClosedWithoutToken: with no token configured the
// operator API is closed (default deny), with a body that says what to
// configure; the probes and /metrics stay open.
func TestOperatorAPIClosedWithoutToken(t *testing.T) {
	src := &ops.Source{}
	src.SetPolicy(fakePolicy{})
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Metrics: ops.NewMetrics(src)}))
	defer hs.Close()
	want := `{"error":"the operator API is closed: no token is configured (start fulfiller with --http-token-file FILE or FULFILLER_HTTP_TOKEN)"}`
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/proposals"}, {"GET", "/v1/proposals/p-1"}, {"DELETE", "/v1/proposals/p-1"}, {"GET", "/v1/policy"},
	} {
		// Any token a client makes up is no better than none.
		for _, tok := range []string{"", "anything"} {
			if code, body := do(t, r.method, hs.URL+r.path, tok); code != http.StatusUnauthorized || compact(t, body) != want {
				t.Errorf("%s %s with token %q: %d %s, want 401 %s", r.method, r.path, tok, code, body, want)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := do(t, "GET", hs.URL+path, ""); code == http.StatusUnauthorized {
			t.Errorf("GET %s: 401, want it open", path)
		}
	}
}

// TestOperatorAPIToken: a missing, wrong, prefixed or differently cased
// token gets 401; the configured one gets through.
func TestOperatorAPIToken(t *testing.T) {
	src := &ops.Source{}
	src.SetPolicy(fakePolicy{})
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Token: token}))
	defer hs.Close()
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + token + "x", "Bearer " + token[:len(token)-1],
		"Basic " + token, token, "Bearer  " + token} {
		req, _ := http.NewRequest("GET", hs.URL+"/v1/policy", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="fulfiller"` {
			t.Errorf("Authorization %q: %d %q, want 401 with a Bearer challenge", auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	if code, body := do(t, "GET", hs.URL+"/v1/policy", token); code != http.StatusOK ||
		compact(t, body) != `{"default":false,"files":["/etc/fulfiller/policy.rego"],"revision":"sha256:abc"}` {
		t.Errorf("with the token: %d %s", code, body)
	}
	// The scheme is case-insensitive (RFC 7235).
	req, _ := http.NewRequest("GET", hs.URL+"/v1/policy", nil)
	req.Header.Set("Authorization", "bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("lower-case scheme: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestOperatorAPIUnknownRoutes: a /v1/ path no route takes answers JSON
// like every /v1/ error (the mux's own answers are plain text): 404, or
// 405 with Allow when the path is a route's under another method; behind
// the token like the routes, so that without it nothing is told.
func TestOperatorAPIUnknownRoutes(t *testing.T) {
	src := &ops.Source{}
	src.SetPolicy(fakePolicy{})
	hs := httptest.NewServer(ops.NewHandler(ops.Options{Source: src, Token: token}))
	defer hs.Close()
	for _, tc := range []struct {
		method, path string
		code         int
		allow, body  string
	}{
		{"GET", "/v1/nope", 404, "", `{"error":"no such route: /v1/nope (see docs/operations.md, \"The HTTP listener\")"}`},
		{"GET", "/v1/proposals/p-1/extra", 404, "", `{"error":"no such route: /v1/proposals/p-1/extra (see docs/operations.md, \"The HTTP listener\")"}`},
		{"GET", "/v1/", 404, "", `{"error":"no such route: /v1/ (see docs/operations.md, \"The HTTP listener\")"}`},
		{"POST", "/v1/proposals", 405, "GET", `{"error":"POST is not allowed on /v1/proposals (allowed: GET)"}`},
		{"PUT", "/v1/grants/g-1", 405, "GET, DELETE", `{"error":"PUT is not allowed on /v1/grants/g-1 (allowed: GET, DELETE)"}`},
	} {
		code, body := do(t, tc.method, hs.URL+tc.path, "")
		if code != http.StatusUnauthorized || compact(t, body) != `{"error":"missing or wrong bearer token"}` {
			t.Errorf("%s %s without the token: %d %s, want 401", tc.method, tc.path, code, body)
		}
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if code, body := do(t, tc.method, hs.URL+tc.path, token); code != tc.code || compact(t, body) != tc.body || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d %s (Allow %q), want %d %s (Allow %q)", tc.method, tc.path, code, body, resp.Header.Get("Allow"), tc.code, tc.body, tc.allow)
		}
	}
}

package mcpfront

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func (r *rig) serveHTTP(opts HTTPOptions) *httptest.Server {
	r.t.Helper()
	srv := httptest.NewServer(r.front.Handler(opts))
	r.t.Cleanup(srv.Close)
	return srv
}

func (r *rig) httpClient(url, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	r.t.Helper()
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "http-client", Version: "2"}, opts).
		Connect(r.ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`

func post(t *testing.T, url, token, body string, header http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestHTTPTwoClients(t *testing.T) {
	r := newRig(t, Config{})
	tokens := ClientTokens{TokenHash("alice-secret"): "alice", TokenHash("bob-secret"): "bob"}
	srv := r.serveHTTP(HTTPOptions{Tokens: tokens})
	url := srv.URL + "/mcp/files"

	// Both clients are told the same, and the policy hears who called.
	el := &elicitor{answer: func(context.Context) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}}
	alice := r.httpClient(url, "alice-secret", &mcp.ClientOptions{ElicitationHandler: el.handle})
	bob := r.httpClient(url, "bob-secret", nil)
	if g := jsonOf(t, call(t, alice, "read_file", map[string]any{"path": "/repo/a.txt"})); g != upMeta+`"content":[{"type":"text","text":"hello"}]}` {
		t.Errorf("alice's read: %s", g)
	}
	if g := jsonOf(t, call(t, bob, "write_file", map[string]any{"path": "/x", "content": "y"})); !strings.Contains(g, `"fulfiller/reason":"policy"`) {
		t.Errorf("bob's write: %s", g)
	}
	// @caller over HTTP: the prompt rides the call's own stream.
	if g := jsonOf(t, call(t, alice, "delete_path", map[string]any{"path": "/repo/b.txt"})); g != upMeta+`"content":[{"type":"text","text":"deleted 1 files under /repo/b.txt"}]}` {
		t.Errorf("alice's approved delete: %s", g)
	}
	if g := jsonOf(t, call(t, bob, "delete_path", map[string]any{"path": "/repo/a.txt"})); !strings.Contains(g, `"fulfiller/reason":"incapable"`) {
		t.Errorf("bob's delete (no elicitation): %s", g)
	}
	ps := r.eng.seen()
	if len(ps) != 4 || ps[0].Proposer != "alice" || ps[1].Proposer != "bob" || ps[2].Proposer != "alice" || ps[3].Proposer != "bob" {
		t.Fatalf("proposers %+v", ps)
	}
	if ps[0].Client.Name != "http-client" || string(ps[0].RPCID) == "null" {
		t.Errorf("client %+v, rpc id %s", ps[0].Client, ps[0].RPCID)
	}

	// No token, a wrong one: 401, and nothing reaches the engine.
	for _, tok := range []string{"", "mallory"} {
		if code, body, _ := post(t, url, tok, initBody, nil); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d %s, want 401", tok, code, body)
		}
	}
	// A session is bound to the token that opened it.
	code, _, h := post(t, url, "alice-secret", initBody, nil)
	sid := h.Get("Mcp-Session-Id")
	if code != http.StatusOK || sid == "" {
		t.Fatalf("alice's initialize: %d, session %q", code, sid)
	}
	hdr := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/repo/a.txt"}}}`
	if code, body, _ := post(t, url, "bob-secret", call, hdr); code != http.StatusForbidden {
		t.Errorf("bob in alice's session: %d %s, want 403", code, body)
	}
	if n := len(r.eng.seen()); n != 4 {
		t.Errorf("%d proposals, want the 4 authenticated ones", n)
	}
}

func TestHTTPBounds(t *testing.T) {
	r := newRig(t, Config{})
	srv := r.serveHTTP(HTTPOptions{MaxBodyBytes: 4096})
	url := srv.URL + "/mcp/files"
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
	if code, body, _ := post(t, url, "", big, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("an oversized body: %d %s, want 413", code, body)
	}
	if code, body, _ := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":`, nil); code != http.StatusBadRequest {
		t.Errorf("malformed JSON: %d %s, want 400", code, body)
	}
	// A browser page on another site cannot drive the endpoint.
	if code, body, _ := post(t, url, "", initBody, http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}); code != http.StatusForbidden {
		t.Errorf("a cross-site request: %d %s, want 403", code, body)
	}
	// DNS rebinding: a loopback listener refuses another Host.
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(initBody))
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host evil.example: %d, want 403", resp.StatusCode)
	}
	if code, _, _ := post(t, srv.URL+"/mcp/nope", "", initBody, nil); code != http.StatusNotFound {
		t.Errorf("an unknown upstream: %d, want 404", code)
	}
	if n := len(r.eng.seen()); n != 0 {
		t.Errorf("%d proposals, want none", n)
	}
}

func TestCheckListen(t *testing.T) {
	tokens := ClientTokens{TokenHash("t"): "a"}
	for _, c := range []struct {
		addr string
		tok  ClientTokens
		ok   bool
	}{
		{"127.0.0.1:8080", nil, true}, {"[::1]:8080", nil, true}, {"localhost:8080", nil, true},
		{"0.0.0.0:8080", nil, false}, {":8080", nil, false}, {"192.168.1.2:8080", nil, false},
		{"0.0.0.0:8080", tokens, true}, {":8080", tokens, true},
	} {
		if err := CheckListen(c.addr, c.tok); (err == nil) != c.ok {
			t.Errorf("CheckListen(%q, %d tokens) = %v", c.addr, len(c.tok), err)
		}
	}
}

func TestParseClientTokens(t *testing.T) {
	good := "# clients\n\nalice " + TokenHash("a") + "\n  bob   " + strings.ToUpper(TokenHash("b")) + "  \nalice " + TokenHash("a2") + "\n"
	got, err := ParseClientTokens(strings.NewReader(good))
	if err != nil || len(got) != 3 || got[TokenHash("a")] != "alice" || got[TokenHash("b")] != "bob" || got[TokenHash("a2")] != "alice" {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "# none\n", "alice\n", "alice abc\n", "alice " + TokenHash("a") + " extra\n",
		"alice " + TokenHash("a") + "\nbob " + TokenHash("a") + "\n", "alice secret-token-in-clear\n"} {
		if got, err := ParseClientTokens(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

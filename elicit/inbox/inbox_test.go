package inbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox"
	"github.com/mewkit/fulfiller/internal/poll"
)

// promptCard is a card as the fulfiller's elicitation makes it: a
// write_file call with path editable (string), a count (integer) and
// bob to delegate to.
func promptCard(t *testing.T) *approver.Card {
	t.Helper()
	params := `{"name":"write_file","arguments":{"path":"/srv/prod/motd","count":1}}`
	digest, _ := approval.CallDigest("tools/call", json.RawMessage(params))
	c, err := approver.ParseCard(agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", To: []string{"alice"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{` +
			`"approve":{"type":"boolean"},"reason":{"type":"string"},"path":{"type":"string","default":"/srv/prod/motd"},"count":{"type":"integer","default":1},` +
			`"delegate_to":{"type":"string","enum":["bob"]}}},` +
			`"_meta":{"proposal":{"id":"p-1","from":"coder","method":"tools/call","params":` + params + `,"digest":"` + digest + `","deadline":"2999-01-01T00:00:00Z"}}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// served is an inbox behind a test server, with one card open.
type served struct {
	in     *inbox.Inbox
	srv    *httptest.Server
	answer chan approver.Answer
	cancel context.CancelFunc
}

func serve(t *testing.T) *served {
	t.Helper()
	in, err := inbox.New(inbox.Options{Approver: "alice", Fulfillers: []string{"fulfiller"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &served{in: in, srv: httptest.NewServer(in.Handler()), answer: make(chan approver.Answer, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		if a, err := in.Ask(ctx, promptCard(t)); err == nil {
			s.answer <- a
		}
	}()
	t.Cleanup(func() { cancel(); in.Close(); s.srv.Close() })
	poll.Until(t, "the card to open", func() bool {
		if err := in.Answer("nonexistent", approver.Answer{}); err == nil {
			t.Fatal("answered a card that does not exist")
		}
		_, err := s.get(t, "/?token="+in.Secret(), nil)
		return err == nil && s.open(t)
	})
	return s
}

// open reports whether the snapshot shows the card open.
func (s *served) open(t *testing.T) bool {
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/events?token="+s.in.Secret(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return strings.Contains(line, `"state":"open"`)
		}
	}
	return false
}

func (s *served) get(t *testing.T, path string, c *http.Client) (*http.Response, error) {
	if c == nil {
		c = noRedirect()
	}
	resp, err := c.Get(s.srv.URL + path)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// Without the secret — no token, a wrong one, or a wrong cookie — the page,
// its assets, its event stream and its answer endpoint all answer 401.
func TestWithoutTheSecretEverythingIs401(t *testing.T) {
	s := serve(t)
	for _, path := range []string{"/", "/app.js", "/style.css", "/events", "/?token=wrong", "/events?token=wrong"} {
		resp, err := s.get(t, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s: %s, want 401", path, resp.Status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: s.in.CookieName(), Value: strings.Repeat("0", len(s.in.Secret()))})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong cookie: %v %v, want 401", resp.Status, err)
	}
	resp, err := http.Post(s.srv.URL+"/answer", "application/json", strings.NewReader(`{"id":"fulfiller-elicit-1","action":"approve"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /answer: %s, want 401", resp.Status)
	}
	select {
	case a := <-s.answer:
		t.Fatalf("answered without the secret: %+v", a)
	default:
	}
}

// The URL's secret becomes an HttpOnly, SameSite cookie, and the page
// sends the browser on to the address without it, so that it stays out of
// the address bar and the history. The cookie alone then opens everything.
func TestTheSecretBecomesACookie(t *testing.T) {
	s := serve(t)
	resp, err := s.get(t, "/?token="+s.in.Secret(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("GET /?token=…: %s to %q, want 303 to /", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == s.in.CookieName() {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value != s.in.Secret() {
		t.Fatalf("cookie %+v, want the secret, HttpOnly, SameSite=Strict", cookie)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	for _, path := range []string{"/?token=" + s.in.Secret(), "/app.js", "/style.css"} {
		resp, err := c.Get(s.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s with the cookie: %s (%d bytes)", path, resp.Status, len(body))
		}
	}
}

// Answers are checked against the card before they reach the client:
// only the form's editable fields with values of their type, only the
// delegates offered, and only from the page's own origin.
func TestAnswerIsCheckedAgainstTheCard(t *testing.T) {
	s := serve(t)
	post := func(body string, header map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/answer", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.AddCookie(&http.Cookie{Name: s.in.CookieName(), Value: s.in.Secret()})
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return resp.StatusCode, e.Error
		}
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		body   string
		header map[string]string
		code   int
		says   string
	}{
		{`{"id":"fulfiller-elicit-1","action":"approve","edits":{"content":"x"}}`, nil, 400, `"content" is not an editable argument`},
		{`{"id":"fulfiller-elicit-1","action":"approve","edits":{"count":1.5}}`, nil, 400, "count must be a whole number"},
		{`{"id":"fulfiller-elicit-1","action":"approve","edits":{"path":7}}`, nil, 400, "path must be text"},
		{`{"id":"fulfiller-elicit-1","action":"delegate","delegate_to":"mallory"}`, nil, 400, `"mallory" is not an approver this prompt may be handed to`},
		{`{"id":"fulfiller-elicit-1","action":"decline","edits":{"path":"/x"}}`, nil, 400, "edits come only with an approval"},
		{`{"id":"fulfiller-elicit-1","action":"launch"}`, nil, 400, `unknown action "launch"`},
		{`{"id":"fulfiller-elicit-1","action":"approve","extra":1}`, nil, 400, "unknown field"},
		{`{"id":"fulfiller-elicit-2","action":"approve"}`, nil, 409, "not open"},
		{`{"id":"fulfiller-elicit-1","action":"approve"}`, map[string]string{"Origin": "http://evil.example"}, 403, "own page"},
		{`{"id":"fulfiller-elicit-1","action":"approve"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "own page"},
		{`{"id":"fulfiller-elicit-1","action":"approve"}`, map[string]string{"Content-Type": "text/plain"}, 415, "application/json"},
	} {
		code, body := post(tc.body, tc.header)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("POST %s %v: %d %s, want %d saying %q", tc.body, tc.header, code, body, tc.code, tc.says)
		}
	}
	select {
	case a := <-s.answer:
		t.Fatalf("a refused answer reached the client: %+v", a)
	default:
	}

	// A valid one, from the page's origin: the edits in the form's order,
	// an unchanged value dropped, and only once.
	origin := map[string]string{"Origin": s.srv.URL}
	code, body := post(`{"id":"fulfiller-elicit-1","action":"approve","reason":" ok ","edits":{"count":3,"path":"/srv/prod/motd"}}`, origin)
	if code != http.StatusAccepted {
		t.Fatalf("valid answer: %d %s", code, body)
	}
	a := <-s.answer
	want := approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "ok", Edits: []approver.Edit{{Name: "count", Value: json.RawMessage("3")}}}
	if fmt.Sprint(a) != fmt.Sprint(want) {
		t.Errorf("answer %+v, want %+v", a, want)
	}
	if code, body := post(`{"id":"fulfiller-elicit-1","action":"decline"}`, origin); code != http.StatusConflict {
		t.Errorf("second answer: %d %s, want 409", code, body)
	}
}

// Closing the inbox (approve stopping) ends every event stream, so that
// the server can shut down and pages say the inbox is gone.
func TestEventStreamEndsWhenTheInboxCloses(t *testing.T) {
	s := serve(t)
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/events?token="+s.in.Secret(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	s.in.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream did not end when the inbox closed")
	}
}

package browsertest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// TestPasskeyTabLeavesNoSession: a tab a finished test used comes back
// to the next PasskeyTab (the same target) with no cookie of the last
// test's session on the same origin.
func TestPasskeyTabLeavesNoSession(t *testing.T) {
	var mu sync.Mutex
	sent := map[string][]string{} // who → the Cookie headers of their page's requests
	who := "alice"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[who] = append(sent[who], r.URL.Path+" "+r.Header.Get("Cookie"))
		mu.Unlock()
		if r.URL.Path == "/set" {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "alice", Path: "/", HttpOnly: true})
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><p id="x">hello</p>`))
	}))
	defer srv.Close()
	var first target.ID
	t.Run("alice", func(t *testing.T) {
		ctx := PasskeyTab(t)
		Do(t, ctx, "sign in", chromedp.Navigate(srv.URL+"/set"), chromedp.Navigate(srv.URL+"/"))
		first = chromedp.FromContext(ctx).Target.TargetID
	})
	mu.Lock()
	who = "bob"
	mu.Unlock()
	t.Run("bob", func(t *testing.T) {
		ctx := PasskeyTab(t)
		if id := chromedp.FromContext(ctx).Target.TargetID; id != first {
			t.Fatalf("a new tab %s, not alice's %s again: nothing to check", id, first)
		}
		Do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/"))
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(sent["alice"], "/ session=alice") {
		t.Fatalf("alice's page sent %q: her session cookie was not set", sent["alice"])
	}
	if !slices.Contains(sent["bob"], "/ ") || slices.ContainsFunc(sent["bob"], func(s string) bool { return strings.Contains(s, "session=") }) {
		t.Fatalf("bob's page sent %q, want no cookie", sent["bob"])
	}
}

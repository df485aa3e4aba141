package inbox_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// A second prompt under an open card's ids with other content: the page
// marks the card contested in words, it has no Approve (nor any answer)
// any more, an answer posted for it from a page that has not caught up is
// refused, and nothing reaches the fulfiller: the proposal still waits.
func TestBrowserContestedCardCannotBeApproved(t *testing.T) {
	t.Parallel() // a space, a fulfiller, an inbox and tabs of its own
	w := newWorld(t, worldOptions{})
	ctx := tab(t, 1280, 900)
	w.open(t, ctx)
	id := w.propose("p-write", "/srv/prod/motd")
	real := w.elicitation("alice", id, nil)
	browsertest.Do(t, ctx, "the real card", chromedp.WaitVisible(button(id, "open", "Approve")))

	spacetest.Forge(t, w.srv, spacetest.ForgedPrompt(t, real, id))
	got := status(t, ctx, id, "ended")
	if want := "⚠ contested: someone else sent a different prompt under this id, so this card may not show what the fulfiller asks; it cannot be answered here (nothing was sent). Ask the operator."; got != want {
		t.Errorf("the contested card says %q, want %q", got, want)
	}
	if names := accessibleNames(t, ctx, card(id, "ended"), "button"); slices.ContainsFunc(names, func(n string) bool {
		return n == "Approve" || n == "Edit" || n == "Decline" || n == "Dismiss" || n == "Delegate"
	}) {
		t.Errorf("the contested card still offers %q", names)
	}
	// The Approve request a page that missed the update would send.
	req, _ := http.NewRequest(http.MethodPost, w.web.URL+"/answer", strings.NewReader(`{"id":`+string(mustJSON(real.ID))+`,"action":"approve"}`))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(&http.Cookie{Name: w.inbox.CookieName(), Value: w.inbox.Secret()})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "the prompt is not open") {
		t.Errorf("posting an approval of the contested card: %d %s, want 409, not open", resp.StatusCode, body)
	}
	// A later prompt is shown: alice's client went on, and answered nothing
	// about the contested one.
	w.propose("p-later", "/srv/prod/later")
	browsertest.Do(t, ctx, "a later card", chromedp.WaitVisible(button("p-later", "open", "Approve")))
	for _, e := range w.wire.Envelopes() {
		if e.From == "alice" && e.CorrelationID.First() == real.ID {
			t.Errorf("alice answered the contested prompt: %s", e.Raw)
		}
	}
	if s, ok := w.ful.Get(id); !ok || s.State != "awaiting_approval" {
		t.Errorf("proposal %+v %v, want still awaiting approval", s, ok)
	}
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

package teaminbox_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
)

// updateScreenshots writes the team inbox screenshots into docs/images,
// where the README's "A team, on phones" shows them:
//
//	go test ./elicit/inbox/teaminbox -run Screenshots -update-screenshots
var updateScreenshots = flag.Bool("update-screenshots", false, "write the team inbox screenshots into docs/images")

// TestTeamInboxScreenshots takes the README's pictures of the team inbox
// (`fulfiller inbox serve`, issue 42: they showed approve --web instead)
// from the real pages: alice enrolled with her passkey, a production write
// waiting for her with a grant on offer, at phone width (the card, then
// its "Approve and allow…" form) and at desktop width. The card gives
// its deadline as a person reads it, not as RFC 3339.
func TestTeamInboxScreenshots(t *testing.T) {
	t.Parallel() // a space, an inbox and browser contexts of its own
	w := newWorld(t)
	w.grants = grantstore.NewRegistry(nil, nil)
	alice := browserTab(t) // a phone: 390×844
	w.enrol(t, alice, "alice")
	p := w.startFulfillerWith(grantPolicy)
	p.propose("p-motd", "/srv/prod/motd")
	do(t, alice, "the card", chromedp.WaitVisible(card("p-motd", "open")))
	text := get(t, alice, "the card's text", chromedp.Text(card("p-motd", "open")))
	if !regexp.MustCompile(`Answer by \d\d?:\d\d( [AP]M)? \(\d+ min left\)`).MatchString(text) || regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`).MatchString(text) {
		t.Errorf("the card's deadline is not a person's:\n%s", text)
	}
	for _, want := range []string{"production writes need a human", `"path": "/srv/prod/motd"`, "Approve\nApprove and allow…\nDecline\nDismiss"} {
		if !strings.Contains(text, want) {
			t.Errorf("the card does not show %q:\n%s", want, text)
		}
	}
	screenshot(t, alice, "team-inbox-phone.png")
	do(t, alice, "the grant form", chromedp.Click(card("p-motd", "open")+`//button[normalize-space()="Approve and allow…"]`),
		chromedp.WaitVisible(card("p-motd", "open")+`//select[@name="grant"]`),
		chromedp.SetValue(card("p-motd", "open")+`//select[@name="grant"]`, "1h"))
	screenshot(t, alice, "team-inbox-phone-grant.png")
	do(t, alice, "back", chromedp.Click(card("p-motd", "open")+`//button[normalize-space()="Back"]`),
		chromedp.EmulateViewport(1280, 800))
	screenshot(t, alice, "team-inbox-desktop.png")
}

// screenshot takes a full-page screenshot, checks it is a PNG, and
// writes it into docs/images with -update-screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, not a PNG", name, len(png))
	}
	path := filepath.Join(t.TempDir(), name)
	if *updateScreenshots {
		path = filepath.Join("..", "..", "..", "docs", "images", name)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

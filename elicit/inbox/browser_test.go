package inbox_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/internal/browsertest"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// updateScreenshots writes the screenshots the browser tests take into
// docs/images, for the README and docs/approving.md:
//
//	go test ./inbox -run Screenshot -update-screenshots
var updateScreenshots = flag.Bool("update-screenshots", false, "write the inbox screenshots into docs/images")

// browser is one headless Chromium for the package's tests; each test
// opens tabs of its own.
var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	os.Exit(code)
}

// tab opens a new tab of width×height CSS pixels. The test fails if the
// page logs an error to its console or throws, at any time until the test
// ends.
func tab(t *testing.T, width, height int64) context.Context {
	t.Helper()
	path := browsertest.Chromium()
	if path == "" {
		testenv.Missing(t, "Chromium for the browser tests: apt-get install chromium, or set FULFILLER_TEST_CHROMIUM")
	}
	browser.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900))
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		browser.ctx, browser.cancel = bctx, func() { bcancel(); acancel() }
		// The first Do starts the browser, bound to bctx: a context with a
		// deadline here would close it when the deadline passed.
		browser.err = chromedp.Do(bctx)
	})
	if browser.err != nil {
		t.Fatalf("start %s: %v", path, browser.err)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height)); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	console := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				problems = append(problems, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page reported an error: %s", p)
		}
	})
	return ctx
}

// open loads the inbox from the URL it prints and waits for its first
// snapshot.
func (w *world) open(t *testing.T, ctx context.Context) {
	t.Helper()
	browsertest.Do(t, ctx, "open the inbox", chromedp.Navigate(w.pageURL()),
		chromedp.WaitVisible(`//p[@id="who" and starts-with(normalize-space(), "answering as alice")]`))
}

// card is the XPath of the card of proposal id in state (open, outcome, …).
func card(id, state string) string {
	return fmt.Sprintf(`//article[@data-proposal=%q and @data-state=%q]`, id, state)
}

// button is the XPath of the button named name in the card of proposal
// id in state.
func button(id, state, name string) string {
	return card(id, state) + fmt.Sprintf(`//button[normalize-space()=%q]`, name)
}

// status reads the status line of the card of id in state, once shown.
func status(t *testing.T, ctx context.Context, id, state string) string {
	t.Helper()
	browsertest.Do(t, ctx, "the "+state+" card of "+id, chromedp.WaitVisible(card(id, state)))
	return browsertest.Get(t, ctx, "its status", chromedp.Text(card(id, state)+`//p[contains(@class,"status")]`))
}

// accessibleNames lists the names the browser's accessibility tree gives
// the controls of role inside the node at sel.
func accessibleNames(t *testing.T, ctx context.Context, sel, role string) []string {
	t.Helper()
	nodes := browsertest.Get(t, ctx, "the node "+sel, chromedp.Nodes(sel))
	ax := browsertest.Get(t, ctx, "the accessibility tree", func(ctx context.Context, tg *chromedp.Target) (*accessibility.QueryAXTreeResult, error) {
		r, err := cdp.Call(ctx, tg, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{BackendNodeID: nodes[0].BackendNodeID, Role: role})
		return &r, err
	})
	var names []string
	for _, n := range ax.Nodes {
		if n.Ignored || n.Name == nil {
			continue
		}
		names = append(names, strings.Trim(string(n.Name.Value), `"`))
	}
	return names
}

// accessibleField is a control as the accessibility tree gives it: what a
// screen reader announces as its name, and then as its description.
type accessibleField struct{ Name, Description string }

// accessibleFields lists the controls of role inside the node at sel with
// their accessible names and descriptions.
func accessibleFields(t *testing.T, ctx context.Context, sel, role string) []accessibleField {
	t.Helper()
	nodes := browsertest.Get(t, ctx, "the node "+sel, chromedp.Nodes(sel))
	ax := browsertest.Get(t, ctx, "the accessibility tree", func(ctx context.Context, tg *chromedp.Target) (*accessibility.QueryAXTreeResult, error) {
		r, err := cdp.Call(ctx, tg, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{BackendNodeID: nodes[0].BackendNodeID, Role: role})
		return &r, err
	})
	var out []accessibleField
	for _, n := range ax.Nodes {
		if n.Ignored {
			continue
		}
		var f accessibleField
		if n.Name != nil {
			f.Name = strings.Trim(string(n.Name.Value), `"`)
		}
		if n.Description != nil {
			f.Description = strings.Trim(string(n.Description.Value), `"`)
		}
		out = append(out, f)
	}
	return out
}

// screenshot takes a full-page screenshot, checks it, and writes it into
// docs/images with -update-screenshots.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := browsertest.Get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: %d bytes, not a PNG", name, len(png))
	}
	path := filepath.Join(t.TempDir(), name)
	if *updateScreenshots {
		path = filepath.Join("..", "..", "docs", "images", name)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

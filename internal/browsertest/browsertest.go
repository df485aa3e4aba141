// Package browsertest starts headless Chromium for tests that need a real
// browser, with a CDP virtual authenticator when they need a passkey: the
// team inbox's package tests and the binary tests of `fulfiller inbox`
// drive the same browser the same way.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// Chromium finds the browser: FULFILLER_TEST_CHROMIUM, else Debian's
// chromium on the PATH (.ci/run installs it), else Chrome; "" when there
// is none.
func Chromium() string {
	if p := os.Getenv("FULFILLER_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is the one headless Chromium of a test binary, started by the
// first PasskeyTab: each tab after it is a browser context of its own
// (cookies, storage, passkeys apart), so a test sees no other test's
// session, and the binary starts Chromium once rather than once a tab
// (most of a short browser test's time on a 2-core machine).
var browser struct {
	mu      sync.Mutex
	started bool
	ctx     context.Context // the browser's first tab, which owns the process
	stop    func()
	err     error
}

// start starts the shared browser at path once; later calls return it.
func start(path string) (context.Context, error) {
	browser.mu.Lock()
	defer browser.mu.Unlock()
	if browser.started {
		return browser.ctx, browser.err
	}
	browser.started = true
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(390, 844))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	browser.ctx, browser.stop = ctx, func() { cancel(); acancel() }
	// The first Do starts the browser, bound to ctx: a context with a
	// deadline here would close it when the deadline passed.
	if err := chromedp.Do(ctx); err != nil {
		browser.err = fmt.Errorf("start %s: %w", path, err)
	}
	return browser.ctx, browser.err
}

// Stop ends the browser the test binary's PasskeyTabs opened their tabs
// in, if they did. A package that uses PasskeyTab calls it from TestMain
// after m.Run: each tab closes when its test ends, the browser when the
// tests do (and the kernel kills it if the binary dies first: chromedp's
// Pdeathsig).
func Stop() {
	browser.mu.Lock()
	defer browser.mu.Unlock()
	if browser.stop != nil {
		browser.stop()
		browser.stop = nil
	}
}

// PasskeyTab opens a tab of the test binary's headless Chromium, in a
// browser context of its own, at phone width (390×844) with a virtual
// authenticator (CTAP2, internal, resident keys, user presence and
// verification simulated): the phone and passkey of one person. The tab
// closes when the test ends; the browser at Stop. Without Chromium the
// test fails in CI and is skipped elsewhere (testenv.Missing).
func PasskeyTab(t testing.TB) context.Context {
	t.Helper()
	path := Chromium()
	if path == "" {
		testenv.Missing(t, "Chromium for the browser tests: apt-get install chromium, or set FULFILLER_TEST_CHROMIUM")
	}
	bctx, err := start(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab of %s: %v", path, err)
	}
	// A headless window is at least 500 px wide: the viewport is what
	// makes it a phone's.
	Do(t, ctx, "emulate a phone's viewport", chromedp.EmulateViewport(390, 844))
	Do(t, ctx, "add a virtual authenticator", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := cdp.Call(ctx, tg, webauthn.Enable, webauthn.EnableParams{}); err != nil {
			return chromedp.Void{}, err
		}
		_, err := cdp.Call(ctx, tg, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
		return chromedp.Void{}, err
	})
	return ctx
}

// Do runs browser steps within 30 seconds, failing the test on error.
func Do(t testing.TB, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Get runs one browser action that yields a value within 30 seconds,
// failing the test on error.
func Get[T any](t testing.TB, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// ConsoleErrors collects what the page of ctx reports as an error from
// now until ctx ends: console.error, an uncaught exception, and the
// browser's own log entries at error level, among them every request
// that failed (a 401, a 404 favicon). It returns the errors so far, each
// as "text url".
func ConsoleErrors(ctx context.Context) func() []string {
	var mu sync.Mutex
	var problems []string
	console := chromedp.Console(ctx) // subscribed now, not when the goroutine runs
	go func() {
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
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(problems)
	}
}

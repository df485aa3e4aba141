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
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/storage"
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
// first PasskeyTab. Each PasskeyTab is a tab in a browser context of its
// own (cookies, storage, passkeys apart), so a test sees no other test's
// session; the binary starts Chromium once rather than once a tab. A
// finished test's tab and browser context go back to idle, wiped, for
// the next PasskeyTab: making a browser context and its first page costs
// Chromium a renderer start and, on a loaded 2-core machine, 1.5–2.5 s
// of a browser test's 5–10.
var browser struct {
	mu      sync.Mutex
	started bool
	ctx     context.Context // the browser's first tab, which owns the process
	stop    func()
	err     error
	idle    []*person
}

// person is a tab in a browser context of its own: one person's phone.
type person struct {
	ctx    context.Context // the tab
	cancel func()          // closes the tab and disposes its browser context
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
// after m.Run: each tab is wiped when its test ends, the browser closes
// when the tests do (and the kernel kills it if the binary dies first:
// chromedp's Pdeathsig).
func Stop() {
	browser.mu.Lock()
	defer browser.mu.Unlock()
	for _, p := range browser.idle {
		p.cancel()
	}
	browser.idle = nil
	if browser.stop != nil {
		browser.stop()
		browser.stop = nil
	}
}

// PasskeyTab opens a tab of the test binary's headless Chromium, in a
// browser context of its own, at phone width (390×844) with a virtual
// authenticator (CTAP2, internal, resident keys, user presence and
// verification simulated): the phone and passkey of one person. When the
// test ends the tab is wiped for a later test (Stop closes it). Without
// Chromium the test fails in CI and is skipped elsewhere
// (testenv.Missing).
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
	p := takeIdle()
	if p == nil {
		ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		p = &person{ctx: ctx, cancel: cancel}
		if err := chromedp.Do(ctx); err != nil {
			cancel()
			t.Fatalf("open a tab of %s: %v", path, err)
		}
	}
	// The test's context ends with the test, and with it what listens to
	// the tab for the test (ConsoleErrors); the tab outlives it.
	ctx, cancel := context.WithCancel(p.ctx)
	var auth webauthn.AuthenticatorID
	t.Cleanup(func() {
		cancel()
		recycle(p, auth)
	})
	// A headless window is at least 500 px wide: the viewport is what
	// makes it a phone's.
	Do(t, ctx, "emulate a phone's viewport", chromedp.EmulateViewport(390, 844))
	Do(t, ctx, "add a virtual authenticator", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if _, err := cdp.Call(ctx, tg, webauthn.Enable, webauthn.EnableParams{}); err != nil {
			return chromedp.Void{}, err
		}
		r, err := cdp.Call(ctx, tg, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
		auth = r.AuthenticatorID
		return chromedp.Void{}, err
	})
	return ctx
}

// takeIdle is a wiped tab a finished test left, or nil.
func takeIdle() *person {
	browser.mu.Lock()
	defer browser.mu.Unlock()
	n := len(browser.idle)
	if n == 0 {
		return nil
	}
	p := browser.idle[n-1]
	browser.idle = browser.idle[:n-1]
	return p
}

// recycle wipes the tab of a finished test and keeps it for the next
// PasskeyTab: the page left for about:blank (its timers and requests
// stop while the test's server still runs), the person's passkey gone
// with the authenticator, the browser context's cookies (the session)
// and cache cleared. A tab that cannot be wiped is closed instead: a
// later test gets a fresh one, never one with a session left in it.
func recycle(p *person, auth webauthn.AuthenticatorID) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		if auth != "" {
			if _, err := cdp.Call(ctx, tg, webauthn.RemoveVirtualAuthenticator, webauthn.RemoveVirtualAuthenticatorParams{AuthenticatorID: auth}); err != nil {
				return chromedp.Void{}, fmt.Errorf("remove the authenticator: %w", err)
			}
		}
		if _, err := cdp.Call(ctx, tg, network.ClearBrowserCache, cdp.Empty{}); err != nil {
			return chromedp.Void{}, fmt.Errorf("clear the cache: %w", err)
		}
		c := chromedp.FromContext(ctx)
		if c.BrowserContextID == "" {
			return chromedp.Void{}, fmt.Errorf("the tab has no browser context of its own")
		}
		if _, err := cdp.Call(ctx, c.Browser, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: c.BrowserContextID}); err != nil {
			return chromedp.Void{}, fmt.Errorf("clear cookies: %w", err)
		}
		left, err := cdp.Call(ctx, c.Browser, storage.GetCookies, storage.GetCookiesParams{BrowserContextID: c.BrowserContextID})
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("list cookies: %w", err)
		}
		if len(left.Cookies) != 0 {
			return chromedp.Void{}, fmt.Errorf("%d cookies left", len(left.Cookies))
		}
		return chromedp.Void{}, nil
	})
	if err != nil {
		p.cancel()
		return
	}
	browser.mu.Lock()
	defer browser.mu.Unlock()
	if browser.stop == nil { // Stop ran: nothing to keep it for
		p.cancel()
		return
	}
	browser.idle = append(browser.idle, p)
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

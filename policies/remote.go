package policies

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults for a RemoteBundle's zero fields.
const (
	DefaultBundlePoll    = 60 * time.Second
	DefaultBundleTimeout = 30 * time.Second
)

// The results of a bundle download, as BundleObserver hears them.
const (
	BundleOK          = "ok"           // a new bundle is in force
	BundleNotModified = "not_modified" // 304: the bundle in force is current
	BundleFailed      = "failed"       // no bundle came: network, timeout, HTTP status
	BundleRefused     = "refused"      // a bundle came and was refused: too large, bad signature, not a bundle, does not compile
)

// BundleObserver hears of every download of a RemoteBundle;
// *ops.Metrics implements it.
type BundleObserver interface {
	ObserveBundleDownload(result string)
}

// RemoteBundle is an OPA bundle served over HTTP(S) (run --bundle-url):
// fetched when the engine loads, then polled with If-None-Match. A
// download that fails or is refused keeps the last good policy in force,
// like a broken file does.
type RemoteBundle struct {
	// URL is where the bundle is served.
	URL string
	// Poll is the mean time between downloads; each wait is jittered by
	// ±10% so that a fleet does not poll in step. DefaultBundlePoll when
	// zero.
	Poll time.Duration
	// Timeout bounds one download; DefaultBundleTimeout when zero.
	Timeout time.Duration
	// Token, when set, is sent as "Authorization: Bearer <token>". It is
	// never logged.
	Token string
	// Client makes the requests; nil for one with the system's TLS roots
	// and proxy settings.
	Client *http.Client
	// Observer, when set, hears of every download.
	Observer BundleObserver
}

// remoteState is what the engine keeps of its RemoteBundle.
type remoteState struct {
	cur  *loadedBundle    // the bundle in force
	seen map[string]int64 // revisions activated before → when (order), to spot roll-backs
	n    int64
	err  error // the last failed or refused download, until one succeeds; guarded by Engine.errMu
}

// maxSeenRevisions bounds what remoteState remembers of past revisions.
const maxSeenRevisions = 256

// activated records b as the bundle in force; it reports whether its
// revision had been in force before, other than just now (a roll-back).
func (s *remoteState) activated(b *loadedBundle) (rolledBack bool) {
	prev := s.cur
	s.cur = b
	if s.seen == nil {
		s.seen = map[string]int64{}
	}
	_, before := s.seen[b.revision]
	rolledBack = before && (prev == nil || prev.revision != b.revision)
	s.n++
	s.seen[b.revision] = s.n
	if len(s.seen) > maxSeenRevisions {
		oldest, at := "", int64(-1)
		for r, n := range s.seen {
			if at < 0 || n < at {
				oldest, at = r, n
			}
		}
		delete(s.seen, oldest)
	}
	return rolledBack
}

func (e *Engine) observeDownload(result string) {
	if o := e.opts.Remote.Observer; o != nil {
		o.ObserveBundleDownload(result)
	}
}

// refusedError marks a download whose body was refused (as opposed to
// one that brought no body).
type refusedError struct{ err error }

func (r refusedError) Error() string { return r.err.Error() }
func (r refusedError) Unwrap() error { return r.err }

func bundleResult(err error) string {
	var r refusedError
	if errors.As(err, &r) {
		return BundleRefused
	}
	return BundleFailed
}

// fetch downloads the bundle, with If-None-Match etag (that of the bundle
// in force) when set. notModified is true on 304.
func (e *Engine) fetch(ctx context.Context, etag string) (b *loadedBundle, notModified bool, err error) {
	rb := e.opts.Remote
	timeout := rb.Timeout
	if timeout <= 0 {
		timeout = DefaultBundleTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rb.URL, nil)
	if err != nil {
		return nil, false, err
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if rb.Token != "" {
		req.Header.Set("Authorization", "Bearer "+rb.Token)
	}
	req.Header.Set("Accept", "application/gzip, application/octet-stream")
	client := http.Client{}
	if rb.Client != nil {
		client = *rb.Client
	}
	if client.CheckRedirect == nil {
		client.CheckRedirect = checkRedirect
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotModified:
		if req.Header.Get("If-None-Match") == "" {
			return nil, false, errors.New("304 Not Modified to a request without If-None-Match")
		}
		return nil, true, nil
	default:
		return nil, false, fmt.Errorf("HTTP %s", resp.Status)
	}
	limit := e.opts.maxBundleBytes()
	if resp.ContentLength > limit {
		return nil, false, refusedError{fmt.Errorf("%w: Content-Length %d is more than %d bytes", errTooLarge, resp.ContentLength, limit)}
	}
	raw, err := readLimited(resp.Body, limit)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, false, refusedError{err}
		}
		return nil, false, fmt.Errorf("read body: %w", err)
	}
	b, err = parseBundle(rb.URL, raw, &e.opts)
	if err != nil {
		return nil, false, refusedError{err}
	}
	b.etag = resp.Header.Get("ETag")
	return b, false, nil
}

// checkRedirect follows at most 10 redirects, as net/http does, and never
// from https to http: that would hand the bearer token and the bundle to
// anyone on the path.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refused a redirect from https to %s", req.URL.Redacted())
	}
	return nil
}

// PollBundle downloads the Remote bundle every Poll (jittered) until ctx
// is done, then returns nil; without a Remote it just waits for ctx. A new
// bundle is compiled with the policy files beside the running set and
// swapped in only when it compiles; a failed download, a 304 or a refused
// bundle leaves the running set alone. Each outcome is logged, counted
// through the Observer and, when it failed, reported by LastReloadError
// until a download succeeds.
func (e *Engine) PollBundle(ctx context.Context) error {
	rb := e.opts.Remote
	if rb == nil {
		<-ctx.Done()
		return nil
	}
	poll := rb.Poll
	if poll <= 0 {
		poll = DefaultBundlePoll
	}
	timer := time.NewTimer(jitter(poll))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			e.pollOnce(ctx)
			timer.Reset(jitter(poll))
		}
	}
}

// jitter spreads d by ±10%.
func jitter(d time.Duration) time.Duration {
	spread := int64(d) / 5
	if spread <= 0 {
		return d
	}
	return d - time.Duration(spread/2) + time.Duration(rand.Int64N(spread))
}

// pollOnce downloads the bundle once and acts on the result.
func (e *Engine) pollOnce(ctx context.Context) {
	// Downloading does not hold the reload lock, so a slow server does
	// not hold up a reload of the files; only this goroutine replaces
	// the bundle in force, so its ETag cannot change meanwhile.
	e.reload.Lock()
	etag := e.remote.cur.etag
	e.reload.Unlock()
	url := e.opts.Remote.URL
	b, notModified, err := e.fetch(ctx, etag)
	if ctx.Err() != nil {
		return // shutting down: not a failure of the server
	}
	e.reload.Lock()
	defer e.reload.Unlock()
	old := e.cur.Load()
	var set *policySet
	if err == nil && !notModified {
		if set, err = buildSet(ctx, &e.opts, e.hook, b); err != nil {
			err = refusedError{err}
		}
	}
	result := BundleOK
	switch {
	case err != nil:
		result = bundleResult(err)
		e.log.Error("policy bundle download "+result+"; the last good policy stays in force",
			"url", url, "error", err, "revision", old.revision)
		err = fmt.Errorf("bundle %s: %w", url, err)
	case notModified:
		result = BundleNotModified
		e.log.Debug("policy bundle not modified", "url", url, "revision", old.revision)
	default:
		rolledBack := e.remote.activated(b)
		switch {
		case rolledBack:
			// OPA accepts an older bundle too: its signature says who
			// built it, not when. Say so loudly, since a server (or
			// whoever sits in front of it) can replay an old one.
			e.log.Warn("policy bundle rolled back to a revision in force before", "url", url, "revision", set.revision, "previous", old.revision)
		case set.revision != old.revision:
			e.log.Info("policy bundle activated", "url", url, "revision", set.revision, "previous", old.revision)
		}
	}
	// The set in force and the error change together: whoever sees the
	// new revision (Revision reads it without errMu) and then asks
	// LastReloadError waits for this and sees the error of the same
	// download, never the one before it.
	e.errMu.Lock()
	if set != nil && err == nil {
		e.cur.Store(set)
	}
	e.remote.err = err
	e.errMu.Unlock()
	e.observeDownload(result)
}

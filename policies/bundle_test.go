package policies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/mewkit/fulfiller/internal/bundletest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestBundleDecidesLikeDirectory: the example policies built into a bundle
// (as `opa build -b examples/policies` does, data.yaml and tests
// included) decide every sample proposal exactly as the directory with
// --data does, and the decisions carry the manifest's revision.
func TestBundleDecidesLikeDirectory(t *testing.T) {
	path := bundletest.WriteFile(t, "bundle.tar.gz", bundletest.Build(t, "../examples/policies", bundletest.Options{Revision: "2026-11-25.1"}))
	b, err := Load(t.Context(), Options{Policies: []string{path}, Timeout: evalTimeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	dir := loadExamples(t)
	if b.Revision() != "2026-11-25.1" || !reflect.DeepEqual(b.Files(), []string{path}) || b.IsDefault() {
		t.Fatalf("bundle engine: revision %q, files %q, default %v", b.Revision(), b.Files(), b.IsDefault())
	}
	inputs, _ := filepath.Glob("../examples/proposals/*.json")
	if len(inputs) < 4 {
		t.Fatalf("sample proposals: %v", inputs)
	}
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	actions := map[Action]bool{}
	for _, in := range inputs {
		raw, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := ParseEvalInput(raw, now)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		got, want := b.DecideDocument(t.Context(), doc), dir.DecideDocument(t.Context(), doc)
		if got.Err != nil || want.Err != nil || got.Revision != "2026-11-25.1" {
			t.Errorf("%s: bundle %+v, directory %+v", in, got, want)
		}
		got.Revision, want.Revision = "", ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: bundle decided %+v, directory %+v", in, got, want)
		}
		actions[got.Action] = true
	}
	if len(actions) != 3 {
		t.Errorf("the samples exercised only %v", actions)
	}
}

// TestBundleRevisionWithoutManifestRevision: a bundle built without
// --revision is named by its content, so that the revision still changes
// exactly when the policy does.
func TestBundleRevisionWithoutManifestRevision(t *testing.T) {
	dir := writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"})
	load := func(dir string) string {
		path := bundletest.WriteFile(t, "b.tar.gz", bundletest.Build(t, dir, bundletest.Options{}))
		e, err := Load(t.Context(), Options{Policies: []string{path}, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	r1, r2 := load(dir), load(dir)
	writeFile(t, filepath.Join(dir, "p.rego"), "package fulfiller\n\ndecision := {\"action\": \"reject\", \"reason\": \"policy\"}\n")
	r3 := load(dir)
	if !strings.HasPrefix(r1, "sha256:") || r1 != r2 || r1 == r3 {
		t.Errorf("revisions %q %q (same content), %q (changed)", r1, r2, r3)
	}
}

const fulfilAll = "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"

// TestBundleSignatures: with a verification key only bundles signed with
// it load; every other case is refused with an error naming the bundle,
// as opa run refuses them.
func TestBundleSignatures(t *testing.T) {
	dir := writeTree(t, map[string]string{"p.rego": fulfilAll})
	priv, pub := bundletest.RSAKey(t)
	otherPriv, _ := bundletest.RSAKey(t)
	pubFile := bundletest.WriteFile(t, "pub.pem", []byte(pub))
	hmacFile := bundletest.WriteFile(t, "secret", []byte("s3cret-hmac"))
	rsa, err := LoadBundleVerification(pubFile, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	hmac, err := LoadBundleVerification(hmacFile, "ci", "HS256", "")
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := LoadBundleVerification(pubFile, "", "", "prod")
	if err != nil {
		t.Fatal(err)
	}

	signed := bundletest.Build(t, dir, bundletest.Options{Revision: "r1", SigningKey: priv})
	// A bundle whose policy was changed after signing: the signature of
	// the original, the files of another.
	swapped := resign(t, bundletest.Build(t, writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"escalate\"}\n"}), bundletest.Options{Revision: "r1"}), signed, rsa)

	tests := []struct {
		name    string
		bundle  []byte
		verify  *BundleVerification
		wantErr string // "" loads
	}{
		{"signed, right key", signed, rsa, ""},
		{"unsigned, no key", bundletest.Build(t, dir, bundletest.Options{Revision: "r1"}), nil, ""},
		{"hmac", bundletest.Build(t, dir, bundletest.Options{Revision: "r1", SigningKey: "s3cret-hmac", Algorithm: "HS256", KeyID: "ci"}), hmac, ""},
		{"scope matches", bundletest.Build(t, dir, bundletest.Options{Revision: "r1", SigningKey: priv, Scope: "prod"}), scoped, ""},
		{"wrong key", bundletest.Build(t, dir, bundletest.Options{Revision: "r1", SigningKey: otherPriv}), rsa, "failed to verify"},
		{"unsigned, key given", bundletest.Build(t, dir, bundletest.Options{Revision: "r1"}), rsa, "bundle missing .signatures.json file"},
		{"signed, no key", signed, nil, "give its key with --bundle-verification-key"},
		{"scope differs", bundletest.Build(t, dir, bundletest.Options{Revision: "r1", SigningKey: priv, Scope: "dev"}), scoped, "scope"},
		{"files changed after signing", swapped, rsa, "digest mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := bundletest.WriteFile(t, "b.tar.gz", tc.bundle)
			e, err := Load(t.Context(), Options{Policies: []string{path}, Verification: tc.verify, Logger: quietLogger()})
			if tc.wantErr == "" {
				if err != nil || e.Revision() != "r1" {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			var le *LoadError
			if err == nil || !errors.As(err, &le) || le.File != path || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Load: %v; want a one-line LoadError naming %s, containing %q", err, path, tc.wantErr)
			}
		})
	}
}

// resign gives the files of bundle b the signatures of bundle from, which
// v verifies.
func resign(t *testing.T, b, from []byte, v *BundleVerification) []byte {
	t.Helper()
	x, err := bundle.NewReader(bytes.NewReader(b)).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	y, err := bundle.NewReader(bytes.NewReader(from)).WithBundleVerificationConfig(v.config()).Read()
	if err != nil {
		t.Fatal(err)
	}
	x.Signatures = y.Signatures
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(x); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBundleVerificationKeyFile: a key file that cannot be a key for the
// algorithm is refused when it is read, naming the file.
func TestBundleVerificationKeyFile(t *testing.T) {
	garbage := bundletest.WriteFile(t, "key.pem", []byte("not a key\n"))
	empty := bundletest.WriteFile(t, "empty", nil)
	for _, tc := range []struct {
		file, alg, want string
	}{
		{garbage, "RS256", garbage + ": not a PEM public key"},
		{empty, "HS256", empty + ": the key file is empty"},
		{"/nonexistent/key.pem", "RS256", "/nonexistent/key.pem: no such file or directory"},
		{garbage, "XX999", `unsupported signing algorithm "XX999"`},
	} {
		if _, err := LoadBundleVerification(tc.file, "", tc.alg, ""); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s %s: %v; want %q", tc.file, tc.alg, err, tc.want)
		}
	}
}

// TestBundleRoots: a bundle owns its manifest roots, as in OPA. --data
// and .rego files outside them combine with it (bundle data is the
// policy's data beside --data); anything inside them, or another bundle
// overlapping them, is refused, where OPA would silently erase it.
func TestBundleRoots(t *testing.T) {
	pol := writeTree(t, map[string]string{
		"fulfiller/p.rego":           "package fulfiller\n\ndecision := {\"action\": \"reject\", \"reason\": \"policy\", \"message\": concat(\" \", [data.fulfiller.config.word, data.settings.word])}\n",
		"fulfiller/config/data.json": `{"word": "bundle"}`,
	})
	b := bundletest.WriteFile(t, "b.tar.gz", bundletest.Build(t, pol, bundletest.Options{Revision: "r1", Roots: []string{"fulfiller"}}))
	all := bundletest.WriteFile(t, "all.tar.gz", bundletest.Build(t, pol, bundletest.Options{Revision: "r2"}))
	other := bundletest.WriteFile(t, "other.tar.gz", bundletest.Build(t, writeTree(t, map[string]string{"x.rego": "package fulfiller.extra\n\nx := 1\n"}), bundletest.Options{Roots: []string{"fulfiller/extra"}}))
	files := writeTree(t, map[string]string{
		"settings.json": `{"settings": {"word": "file"}}`,
		"inside.json":   `{"fulfiller": {"config": {"x": 1}}}`,
		"extra.rego":    "package fulfiller.extra\n\nx := 1\n",
		"outside.rego":  "package helpers\n\ny := 1\n",
	})
	f := func(name string) string { return filepath.Join(files, name) }

	e, err := Load(t.Context(), Options{Policies: []string{b, f("outside.rego")}, Data: []string{f("settings.json")}, Timeout: evalTimeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	d := e.Decide(t.Context(), callInput(t, "coder", "read_file", `{}`, ""))
	if d.Err != nil || d.Message != "bundle file" || !strings.HasPrefix(d.Revision, "r1+sha256:") {
		t.Errorf("decision %+v: want both data documents and revision r1+<files>", d)
	}

	for _, tc := range []struct {
		name           string
		policies, data []string
		wantFile, want string
	}{
		{"--data inside the roots", []string{b}, []string{f("inside.json")}, f("inside.json"), "it sets data.fulfiller, inside the manifest roots [\"fulfiller\"] of bundle " + b},
		{"--data with a root-owning bundle", []string{all}, []string{f("settings.json")}, f("settings.json"), "inside the manifest roots [\"\"]"},
		{"rego inside the roots", []string{b, f("extra.rego")}, nil, f("extra.rego"), "package data.fulfiller.extra is inside the manifest roots"},
		{"overlapping bundles", []string{b, other}, nil, other, `its manifest root "fulfiller/extra" overlaps root "fulfiller" of ` + b},
	} {
		_, err := Load(t.Context(), Options{Policies: tc.policies, Data: tc.data, Logger: quietLogger()})
		var le *LoadError
		if !errors.As(err, &le) || le.File != tc.wantFile || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %s: %q", tc.name, err, tc.wantFile, tc.want)
		}
	}
}

// TestBundleSize: a bundle over the limit is refused, and so is one that
// expands past it (a gzip bomb), before OPA reads it.
func TestBundleSize(t *testing.T) {
	big := writeTree(t, map[string]string{
		"p.rego":    fulfilAll,
		"data.json": `{"pad": "` + strings.Repeat("a", 2<<20) + `"}`,
	})
	raw := bundletest.Build(t, big, bundletest.Options{})
	if len(raw) > 64<<10 {
		t.Fatalf("the bundle compressed to %d bytes; the test wants a small one", len(raw))
	}
	path := bundletest.WriteFile(t, "b.tar.gz", raw)
	for _, tc := range []struct {
		max  int64
		want string
	}{
		{int64(len(raw)) - 1, fmt.Sprintf("%s: bundle too large: more than %d bytes", path, len(raw)-1)},
		{1 << 20, path + ": bundle too large: expands to more than 1048576 bytes"},
	} {
		if _, err := Load(t.Context(), Options{Policies: []string{path}, MaxBundleBytes: tc.max, Logger: quietLogger()}); err == nil || err.Error() != tc.want {
			t.Errorf("max %d: %v; want %q", tc.max, err, tc.want)
		}
	}
	if _, err := Load(t.Context(), Options{Policies: []string{path}, MaxBundleBytes: 4 << 20, Logger: quietLogger()}); err != nil {
		t.Errorf("under the limit: %v", err)
	}
}

// bundleServer serves one bundle at a time with a strong ETag, answering
// If-None-Match with 304, as a static file server or S3 does. Tests swap
// what it serves.
type bundleServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     []byte
	etag     string
	status   int  // non-zero: answer this instead
	chunked  bool // send the body without Content-Length
	requests []*http.Request
}

func newBundleServer(t *testing.T, body []byte) *bundleServer {
	s := &bundleServer{}
	s.serve(body)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests = append(s.requests, r)
		switch {
		case s.status != 0:
			http.Error(w, "broken", s.status)
		case s.etag != "" && r.Header.Get("If-None-Match") == s.etag:
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("ETag", s.etag)
			if !s.chunked {
				w.Header().Set("Content-Length", fmt.Sprint(len(s.body)))
			}
			_, _ = w.Write(s.body)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) serve(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.status, s.chunked = body, 0, false
	s.etag = fmt.Sprintf(`"%d-%d"`, len(s.requests), len(body))
}

func (s *bundleServer) fail(status int) { s.mu.Lock(); s.status = status; s.mu.Unlock() }

func (s *bundleServer) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[len(s.requests)-1]
}

// downloads records what a BundleObserver hears.
type downloads struct {
	mu      sync.Mutex
	results []string
}

func (d *downloads) ObserveBundleDownload(result string) {
	d.mu.Lock()
	d.results = append(d.results, result)
	d.mu.Unlock()
}

func (d *downloads) count(result string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.results {
		if r == result {
			n++
		}
	}
	return n
}

// TestRemoteBundle: a signed bundle served over HTTP is fetched at load,
// polled with If-None-Match (304 changes nothing), and a new revision is
// in force for the next decision. A failed download, a 500, a bundle
// signed with another key and an enormous body each keep the last good
// policy and show in LastReloadError and the observer until a download
// succeeds; a roll-back to an older revision is accepted (as OPA does)
// and logged as one. The token goes out as a bearer token and never into
// the log.
func TestRemoteBundle(t *testing.T) {
	priv, pub := bundletest.RSAKey(t)
	otherPriv, _ := bundletest.RSAKey(t)
	verify, err := LoadBundleVerification(bundletest.WriteFile(t, "pub.pem", []byte(pub)), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	policy := func(action string) string {
		return writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"" + action + "\", \"reason\": \"policy\"}\n"})
	}
	v1 := bundletest.Build(t, policy("fulfill"), bundletest.Options{Revision: "v1", SigningKey: priv})
	v2 := bundletest.Build(t, policy("reject"), bundletest.Options{Revision: "v2", SigningKey: priv})
	forged := bundletest.Build(t, policy("fulfill"), bundletest.Options{Revision: "v3", SigningKey: otherPriv})

	srv := newBundleServer(t, v1)
	var log logBuffer
	var obs downloads
	e, err := Load(t.Context(), Options{
		Timeout: evalTimeout, Logger: textLogger(&log), Verification: verify, MaxBundleBytes: 1 << 20,
		Remote: &RemoteBundle{URL: srv.URL + "/bundle.tar.gz", Poll: 10 * time.Millisecond, Token: "tok-s3cret", Observer: &obs},
	})
	if err != nil {
		t.Fatal(err)
	}
	decide := func() Decision { return e.Decide(t.Context(), callInput(t, "coder", "read_file", `{}`, "")) }
	if d := decide(); d.Action != Fulfill || d.Revision != "v1" || obs.count(BundleOK) != 1 || !reflect.DeepEqual(e.Files(), []string{srv.URL + "/bundle.tar.gz"}) {
		t.Fatalf("after load: %+v, %v, files %v", d, obs.results, e.Files())
	}
	if got := srv.last().Header.Get("Authorization"); got != "Bearer tok-s3cret" {
		t.Errorf("Authorization %q", got)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- e.PollBundle(ctx) }()

	// Unchanged: 304 to If-None-Match, nothing rebuilt.
	poll.Until(t, "a 304", func() bool { return obs.count(BundleNotModified) > 0 })
	if inm := srv.last().Header.Get("If-None-Match"); inm == "" || e.Revision() != "v1" {
		t.Errorf("If-None-Match %q, revision %q", inm, e.Revision())
	}

	// Rollout.
	srv.serve(v2)
	poll.Until(t, "v2 in force", func() bool { return e.Revision() == "v2" })
	if d := decide(); d.Action != Reject || d.Revision != "v2" || e.LastReloadError() != nil {
		t.Fatalf("after rollout: %+v, %v", d, e.LastReloadError())
	}

	// Broken: each keeps v2 and is reported until a download succeeds.
	for _, broken := range []struct {
		name   string
		apply  func()
		result string
		want   string
	}{
		{"500", func() { srv.fail(http.StatusInternalServerError) }, BundleFailed, "HTTP 500 Internal Server Error"},
		{"forged", func() { srv.serve(forged) }, BundleRefused, "failed to verify"},
		{"enormous", func() { srv.serve(bytes.Repeat([]byte("x"), 2<<20)) }, BundleRefused, "bundle too large: Content-Length 2097152 is more than 1048576 bytes"},
		{"enormous, unannounced", func() {
			srv.serve(bytes.Repeat([]byte("y"), 2<<20))
			srv.mu.Lock()
			srv.chunked = true
			srv.mu.Unlock()
		}, BundleRefused, "bundle too large: more than 1048576 bytes"},
		{"not a bundle", func() { srv.serve([]byte("<html>login</html>")) }, BundleRefused, "not a .tar.gz bundle"},
	} {
		before := obs.count(broken.result)
		broken.apply()
		poll.Until(t, broken.name+" reported", func() bool {
			err := e.LastReloadError()
			return err != nil && strings.Contains(err.Error(), broken.want)
		})
		err := e.LastReloadError()
		if obs.count(broken.result) <= before {
			t.Errorf("%s: not counted as %s: %v", broken.name, broken.result, obs.results)
		}
		if d := decide(); d.Revision != "v2" || d.Action != Reject || err == nil || !strings.Contains(err.Error(), broken.want) ||
			!strings.Contains(err.Error(), srv.URL) {
			t.Errorf("%s: decision %+v, LastReloadError %v; want v2 kept and %q", broken.name, d, err, broken.want)
		}
	}

	// Roll-back to v1, replayed: accepted, and logged as a roll-back.
	srv.serve(v1)
	poll.Until(t, "v1 again", func() bool { return e.Revision() == "v1" })
	if e.LastReloadError() != nil || !strings.Contains(log.String(), `msg="policy bundle rolled back to a revision in force before"`) {
		t.Errorf("after roll-back: %v\n%s", e.LastReloadError(), log.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("PollBundle: %v", err)
	}
	if strings.Contains(log.String(), "tok-s3cret") {
		t.Errorf("the token is in the log:\n%s", log.String())
	}
}

// TestRemoteBundleAtLoad: a bundle server that fails, or serves a bundle
// that is refused, makes Load fail naming the URL.
func TestRemoteBundleAtLoad(t *testing.T) {
	srv := newBundleServer(t, []byte("junk"))
	url := srv.URL + "/b.tar.gz"
	var obs downloads
	_, err := Load(t.Context(), Options{Logger: quietLogger(), Remote: &RemoteBundle{URL: url, Observer: &obs}})
	if err == nil || !strings.HasPrefix(err.Error(), url+": not a .tar.gz bundle") || obs.count(BundleRefused) != 1 {
		t.Errorf("junk: %v, %v", err, obs.results)
	}
	srv.fail(http.StatusNotFound)
	_, err = Load(t.Context(), Options{Logger: quietLogger(), Remote: &RemoteBundle{URL: url, Observer: &obs}})
	if err == nil || err.Error() != url+": HTTP 404 Not Found" || obs.count(BundleFailed) != 1 {
		t.Errorf("404: %v, %v", err, obs.results)
	}
}

// TestBundleFileReloadKeepsLastGood: a bundle file in --policy is watched
// like a .rego file. Replaced by one signed with another key, it is
// refused and the last good bundle keeps deciding (LastReloadError says
// why); replaced by a good one, that one decides.
func TestBundleFileReloadKeepsLastGood(t *testing.T) {
	priv, pub := bundletest.RSAKey(t)
	otherPriv, _ := bundletest.RSAKey(t)
	verify, err := LoadBundleVerification(bundletest.WriteFile(t, "pub.pem", []byte(pub)), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	src := func(action string) string {
		return writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"" + action + "\", \"reason\": \"policy\"}\n"})
	}
	path := filepath.Join(t.TempDir(), "policy.tar.gz")
	replace := func(raw []byte) {
		// As a deployment does: write beside, rename over.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	replace(bundletest.Build(t, src("fulfill"), bundletest.Options{Revision: "v1", SigningKey: priv}))
	e, err := Load(t.Context(), Options{Policies: []string{path}, Verification: verify, Timeout: evalTimeout, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// An edit made before the watches are in place is never seen.
	startWatch(t, e)

	replace(bundletest.Build(t, src("escalate"), bundletest.Options{Revision: "v2", SigningKey: otherPriv}))
	poll.Until(t, "the forged bundle refused", func() bool { return e.LastReloadError() != nil })
	d := e.Decide(t.Context(), callInput(t, "coder", "read_file", `{}`, ""))
	if err := e.LastReloadError(); d.Action != Fulfill || d.Revision != "v1" || !strings.Contains(err.Error(), path+": failed to verify JWT signature") {
		t.Errorf("after the forged bundle: %+v, %v", d, err)
	}
	replace(bundletest.Build(t, src("reject"), bundletest.Options{Revision: "v3", SigningKey: priv}))
	poll.Until(t, "v3 in force", func() bool { return e.Revision() == "v3" })
	if d := e.Decide(t.Context(), callInput(t, "coder", "read_file", `{}`, "")); d.Action != Reject || e.LastReloadError() != nil {
		t.Errorf("after v3: %+v, %v", d, e.LastReloadError())
	}
}

// TestRemoteBundleNoDowngrade: a bundle server on https that redirects to
// plain http is not followed, so the token does not travel in clear.
func TestRemoteBundleNoDowngrade(t *testing.T) {
	plain := newBundleServer(t, []byte("never fetched"))
	tlsSrv := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/b.tar.gz", http.StatusFound))
	t.Cleanup(tlsSrv.Close)
	_, err := Load(t.Context(), Options{Logger: quietLogger(), Remote: &RemoteBundle{URL: tlsSrv.URL + "/b.tar.gz", Token: "tok", Client: tlsSrv.Client()}})
	if err == nil || !strings.Contains(err.Error(), "refused a redirect from https to "+plain.URL+"/b.tar.gz") {
		t.Errorf("Load: %v", err)
	}
	plain.mu.Lock()
	defer plain.mu.Unlock()
	if len(plain.requests) != 0 {
		t.Errorf("the plain server was asked %d times", len(plain.requests))
	}
}

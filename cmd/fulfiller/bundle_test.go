package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mewkit/fulfiller/internal/bundletest"
)

// TestEvalBundleLikeDirectory: `eval --policy bundle.tar.gz` (the bundle
// `opa build -b examples/policies --revision …` makes, built here with
// OPA's bundle package) prints, for every sample proposal, the decision
// eval prints for the directory with its data, with the bundle's revision.
func TestEvalBundleLikeDirectory(t *testing.T) {
	path := bundletest.WriteFile(t, "policies.tar.gz", bundletest.Build(t, examplePolicies, bundletest.Options{Revision: "examples-1"}))
	inputs, _ := filepath.Glob(filepath.Join(proposals, "*.json"))
	if len(inputs) < 4 {
		t.Fatalf("sample proposals: %v", inputs)
	}
	for _, in := range inputs {
		// A full input document fixes "now"; a bare envelope gets the
		// clock, which the example policies do not read.
		gotOut, gotErr, gotCode := cli(t, "", "eval", "--policy", path, "--input", in, "--policy-timeout", "1m")
		wantOut, _, wantCode := cli(t, "", "eval", "--policy", examplePolicies, "--data", exampleData, "--input", in, "--policy-timeout", "1m")
		var got, want map[string]any
		if err := json.Unmarshal([]byte(gotOut), &got); err != nil || gotCode != 0 || wantCode != 0 || gotErr != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", in, gotCode, gotOut, gotErr)
		}
		if err := json.Unmarshal([]byte(wantOut), &want); err != nil {
			t.Fatal(err)
		}
		if got["revision"] != "examples-1" {
			t.Errorf("%s: revision %v", in, got["revision"])
		}
		delete(got, "revision")
		delete(want, "revision")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: bundle decided %v, directory %v", in, got, want)
		}
	}
}

// TestBundleRefusedAtStart: a bundle signed with another key, an unsigned
// bundle where a key is given, a broken bundle server and bad bundle flags
// each stop run (and run --check, eval) with exit 2 and one line naming
// the bundle, URL, flag or file.
func TestBundleRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	_, pub := bundletest.RSAKey(t)
	otherPriv, _ := bundletest.RSAKey(t)
	pubFile := bundletest.WriteFile(t, "pub.pem", []byte(pub))
	policy := bundletest.WriteFile(t, "p.rego", []byte("package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"))
	src := filepath.Dir(policy)
	forged := bundletest.WriteFile(t, "forged.tar.gz", bundletest.Build(t, src, bundletest.Options{Revision: "r1", SigningKey: otherPriv}))
	unsigned := bundletest.WriteFile(t, "unsigned.tar.gz", bundletest.Build(t, src, bundletest.Options{Revision: "r1"}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/forged.tar.gz":
			http.ServeFile(w, r, forged)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	emptyLog := bundletest.WriteFile(t, "decisions.jsonl", nil)
	gw := []string{"run", "--gateway", "ws://127.0.0.1:1", "--join-timeout", "1s"}
	key := []string{"--bundle-verification-key", pubFile}
	badSig := ": failed to verify JWT signature: crypto/rsa: verification error\n"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"forged file", append(append(gw, "--policy", forged), key...), "fulfiller: --policy " + forged + badSig},
		{"forged file, --check", append(append(gw, "--check", "--policy", forged), key...), "fulfiller: --policy " + forged + badSig},
		{"forged file, eval", append([]string{"eval", "--input", filepath.Join(proposals, "read.json"), "--policy", forged}, key...), "fulfiller: --policy " + forged + badSig},
		{"forged file, replay", append([]string{"replay", "--decision-log", emptyLog, "--policy", forged}, key...), "fulfiller: " + forged + badSig},
		{"forged shadow", append(append(gw, "--check", "--shadow-policy", forged), key...), "fulfiller: --shadow-policy: " + forged + badSig},
		{"unsigned file", append(append(gw, "--policy", unsigned), key...), "fulfiller: --policy " + unsigned + ": bundle missing .signatures.json file\n"},
		{"forged URL", append(append(gw, "--bundle-url", srv.URL+"/forged.tar.gz"), key...), "fulfiller: " + srv.URL + "/forged.tar.gz" + badSig},
		{"missing URL", append(gw, "--bundle-url", srv.URL+"/none.tar.gz"), "fulfiller: " + srv.URL + "/none.tar.gz: HTTP 404 Not Found\n"},
		{"bad URL", append(gw, "--bundle-url", "ftp://x/b.tar.gz"), "fulfiller: --bundle-url \"ftp://x/b.tar.gz\": want https://host/path (or http:// on loopback)\n"},
		{"token in clear", append(gw, "--bundle-url", "http://bundles.example.com/b.tar.gz", "--bundle-token-file", pubFile),
			"fulfiller: --bundle-url http://bundles.example.com/b.tar.gz: plain http to a host that is not loopback would send the --bundle-token-file token in clear; use https\n"},
		{"bad key file", append(gw, "--policy", unsigned, "--bundle-verification-key", policy),
			"fulfiller: --bundle-verification-key " + policy + ": not a PEM public key (RS256 needs one; an HMAC secret goes with HS256)\n"},
		{"missing key file", append(gw, "--policy", unsigned, "--bundle-verification-key", filepath.Join(dir, "nope.pem")),
			"fulfiller: --bundle-verification-key " + filepath.Join(dir, "nope.pem") + ": no such file or directory\n"},
		{"bad poll", append(gw, "--bundle-url", srv.URL+"/b.tar.gz", "--bundle-poll", "0s"), "fulfiller: --bundle-poll 0s: must be positive\n"},
	} {
		stdout, stderr, code := cli(t, "", tc.args...)
		if code != 2 || stdout != "" || lastLine(stderr) != tc.want {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and last line %q", tc.name, code, stdout, stderr, tc.want)
		}
	}
}

// lastLine is the last line of s (with its newline): run logs warnings
// before the error.
func lastLine(s string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	return strings.TrimSuffix(lines[len(lines)-1], "\n") + "\n"
}

// bundleHost serves one bundle at a time with an ETag, answering
// If-None-Match with 304, and records the requests' Authorization.
type bundleHost struct {
	*httptest.Server
	mu     sync.Mutex
	body   []byte
	etag   string
	n      int
	auth   []string
	served map[int]int // status → count
}

func newBundleHost(t *testing.T, body []byte) *bundleHost {
	h := &bundleHost{served: map[int]int{}}
	h.serve(body)
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.auth = append(h.auth, r.Header.Get("Authorization"))
		if r.Header.Get("If-None-Match") == h.etag {
			h.served[http.StatusNotModified]++
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.served[http.StatusOK]++
		w.Header().Set("ETag", h.etag)
		_, _ = w.Write(h.body)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *bundleHost) serve(body []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	h.body, h.etag = body, fmt.Sprintf(`"b%d"`, h.n)
}

func (h *bundleHost) count(status int) int { h.mu.Lock(); defer h.mu.Unlock(); return h.served[status] }

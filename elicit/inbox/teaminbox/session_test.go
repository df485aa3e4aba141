package teaminbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/mewkit/fulfiller/elicit/approval"
)

const sessionOrigin = "http://localhost:8766"

// testPasskey is an ES256 passkey of id, as an enrolment records it.
func testPasskey(t *testing.T, id string) approval.Passkey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey.Bytes()
	cose, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: pub[1:33], YCoord: pub[33:],
	})
	if err != nil {
		t.Fatal(err)
	}
	return approval.Passkey{RPID: "localhost", Origin: sessionOrigin, CredentialID: []byte(randomID()), PublicKey: cose}
}

// signedIn makes a session for approver as a finished sign-in does and
// returns its cookie.
func signedIn(t *testing.T, s *Server, approver string) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	s.signIn(rec, approver)
	for _, c := range rec.Result().Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}

// call makes a request to the inbox from its page, with cookie.
func call(s *Server, method, path string, cookie *http.Cookie) *httptest.ResponseRecorder {
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{}`)
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, path, body)
	req.Header.Set("Origin", sessionOrigin)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

// TestSignOutAndRevokeEndSessions (issue 41, row 7): a lost device's
// browser session read cards and arguments for up to 12 h after the
// approver enrolled again, and there was no sign-out or revoke. Signing
// out ends the session; a re-enrolment (here or by another inbox on the
// same directory) and `inbox revoke ID` end every session of that
// approver.
func TestSignOutAndRevokeEndSessions(t *testing.T) {
	dir := t.TempDir()
	if err := appendPasskey(dir, "alice", testPasskey(t, "alice")); err != nil {
		t.Fatal(err)
	}
	if err := appendPasskey(dir, "bob", testPasskey(t, "bob")); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Dir: dir, RPID: "localhost", Origin: sessionOrigin})
	if err != nil {
		t.Fatal(err)
	}
	cards := func(c *http.Cookie) int { return call(s, http.MethodGet, "/api/cards", c).Code }

	// Sign-out.
	phone := signedIn(t, s, "alice")
	if code := cards(phone); code != http.StatusOK {
		t.Fatalf("signed in: %d", code)
	}
	rec := call(s, http.MethodPost, "/api/logout", phone)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Set-Cookie"), cookieName+"=;") {
		t.Fatalf("sign-out: %d %q %s", rec.Code, rec.Header().Get("Set-Cookie"), rec.Body)
	}
	if code := cards(phone); code != http.StatusUnauthorized {
		t.Errorf("after sign-out the session reads cards: %d", code)
	}

	// Re-enrolment, written by another inbox on the same directory (or
	// this one): every earlier session of alice ends, bob's stays.
	lost, laptop, bobs := signedIn(t, s, "alice"), signedIn(t, s, "alice"), signedIn(t, s, "bob")
	if err := appendPasskey(dir, "alice", testPasskey(t, "alice")); err != nil {
		t.Fatal(err)
	}
	if code := cards(lost); code != http.StatusUnauthorized {
		t.Errorf("after re-enrolment the lost device's session reads cards: %d", code)
	}
	if code := cards(laptop); code != http.StatusUnauthorized {
		t.Errorf("after re-enrolment another old session reads cards: %d", code)
	}
	if code := cards(bobs); code != http.StatusOK {
		t.Errorf("bob's session ended with alice's re-enrolment: %d", code)
	}

	// inbox revoke bob: his passkey is gone and his sessions end.
	if err := RevokePasskey(dir, "bob"); err != nil {
		t.Fatal(err)
	}
	if code := cards(bobs); code != http.StatusUnauthorized {
		t.Errorf("after inbox revoke bob his session reads cards: %d", code)
	}
	keys, err := approval.LoadApproverKeys(filepath.Join(dir, PasskeysFile))
	if err != nil || keys.Has("bob") || !keys.Has("alice") {
		t.Fatalf("passkeys after revoke: %v %v", keys.IDs(), err)
	}
	// Revoking the last passkey says so: fulfiller run refuses a keys
	// file that keys nobody without saying so.
	if err := RevokePasskey(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	keys, err = approval.LoadApproverKeys(filepath.Join(dir, PasskeysFile))
	if err != nil || len(keys.IDs()) != 0 || !keys.None {
		t.Fatalf("passkeys after the last revoke: %v none=%v %v", keys.IDs(), keys.None, err)
	}
	if err := RevokePasskey(dir, "carol"); err == nil || !strings.Contains(err.Error(), "carol has no passkey") {
		t.Errorf("revoking nobody: %v", err)
	}
}

// TestExpiredEnrolmentLinkRemoved (issue 41, row 8): an expired link's
// file stayed in enrol/, though the docs say it is removed. It is removed
// when it is refused, and when the inbox finds it expired (at start, and
// as it runs, whenever a link is made or looked at).
func TestExpiredEnrolmentLinkRemoved(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	refused, err := CreateEnrolment(dir, "alice", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreateEnrolment(dir, "bob", time.Hour, t0); err != nil {
		t.Fatal(err)
	}
	live, err := CreateEnrolment(dir, "carol", 3*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	files := func() []string {
		entries, _ := os.ReadDir(filepath.Join(dir, enrolDir))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	// Refused once expired: its file goes.
	if _, err := lookupEnrolment(dir, refused, t0.Add(2*time.Hour)); err != ErrEnrolment {
		t.Fatalf("expired link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, enrolDir, tokenHash(refused))); !os.IsNotExist(err) {
		t.Errorf("the refused link's file stays: %v (%v)", files(), err)
	}
	// A start after bob's link expired removes it; carol's stays.
	if _, err := New(Options{Dir: dir, RPID: "localhost", Origin: sessionOrigin, Now: func() time.Time { return t0.Add(2 * time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	if got := files(); len(got) != 1 || got[0] != tokenHash(live) {
		t.Errorf("enrol/ holds %v, want carol's link alone", got)
	}
}

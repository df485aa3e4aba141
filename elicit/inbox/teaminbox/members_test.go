package teaminbox_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox/teaminbox"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

const testOrigin = "http://localhost:8766"

// passkeyLine is a keys line for id with a fresh ES256 public key, as an
// earlier enrolment would have left in the passkeys file.
func passkeyLine(t *testing.T, id string) string {
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
	pk := approval.Passkey{RPID: "localhost", Origin: testOrigin, CredentialID: []byte("cred-" + id), PublicKey: cose}
	return fmt.Sprintf("%s %s %s\n", id, approval.KeyTypeWebAuthn, approval.EncodePasskey(pk))
}

// post calls the inbox's API as its page does, from its origin.
func post(t *testing.T, h http.Handler, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Origin", testOrigin)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out struct {
		Approver string `json:"approver"`
		Error    string `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out.Approver + out.Error
}

// TestRunJoinsEnrolledApprovers: Run joins the space as every approver the
// passkeys file lists (an inbox restarted after enrolments), but, with
// Options.Approvers (--approver-directory), only as those listed: an
// unlisted one is neither joined, nor let sign in, nor enrolled by a link
// made for them. When ctx ends, Run returns with its approvers gone.
func TestRunJoinsEnrolledApprovers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, teaminbox.PasskeysFile), []byte(passkeyLine(t, "alice")+passkeyLine(t, "mallory")), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := space.New(space.Config{Tokens: map[string][]agent.Capability{"human-token": {{Kind: "mcp/response"}, {Kind: "chat"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	in, err := teaminbox.New(teaminbox.Options{Dir: dir, RPID: "localhost", Origin: testOrigin, Approvers: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var joined []string
	join := func(ctx context.Context, id string) (approver.Link, error) {
		mu.Lock()
		joined = append(joined, id)
		mu.Unlock()
		c, subs, err := agent.DialSubscribed(ctx, agent.Config{URL: srv.URL(), ID: id, Token: "human-token"}, approver.SubscribeOptions())
		if err != nil {
			return approver.Link{}, err
		}
		return approver.SpaceLink(c, subs[0]), nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx, join, approver.Options{}) }()
	watcher := spacetest.Join(t, context.Background(), srv, "watcher", "human-token")
	poll.Until(t, "alice in the space", func() bool { _, ok := watcher.Participant("alice"); return ok })

	h := in.Handler()
	if code, msg := post(t, h, "/api/login/begin", `{"approver":"mallory"}`); code != http.StatusForbidden {
		t.Errorf("mallory's sign-in: %d %q, want 403", code, msg)
	}
	token, err := teaminbox.CreateEnrolment(dir, "mallory", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if code, msg := post(t, h, "/api/enrol/begin", `{"token":"`+token+`"}`); code != http.StatusForbidden || msg != teaminbox.ErrEnrolment.Error() {
		t.Errorf("mallory's enrolment link: %d %q, want 403 %q", code, msg, teaminbox.ErrEnrolment)
	}
	if code, msg := post(t, h, "/api/login/begin", `{"approver":"alice"}`); code != http.StatusOK {
		t.Errorf("alice's sign-in: %d %q, want 200", code, msg)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	poll.Until(t, "alice gone", func() bool { _, ok := watcher.Participant("alice"); return !ok })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(joined, []string{"alice"}) {
		t.Errorf("joined %v, want [alice]", joined)
	}
}

// TestEnrolmentLinkExpires: a link works until its expiry, and not after;
// refused then, its file is removed.
func TestEnrolmentLinkExpires(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	token, err := teaminbox.CreateEnrolment(dir, "alice", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	// Only the token's hash is kept.
	entries, _ := os.ReadDir(filepath.Join(dir, "enrol"))
	if len(entries) != 1 || strings.Contains(entries[0].Name(), token) {
		t.Fatalf("enrol/ holds %v", entries)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "enrol", entries[0].Name()))
	if strings.Contains(string(b), token) {
		t.Errorf("the token is stored: %s", b)
	}
	for _, tc := range []struct {
		at   time.Duration
		code int
		msg  string
	}{
		{59 * time.Minute, http.StatusOK, "alice"},
		{time.Hour, http.StatusForbidden, teaminbox.ErrEnrolment.Error()},
	} {
		in, err := teaminbox.New(teaminbox.Options{Dir: dir, RPID: "localhost", Origin: testOrigin, Now: func() time.Time { return t0.Add(tc.at) }})
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := post(t, in.Handler(), "/api/enrol/begin", `{"token":"`+token+`"}`); code != tc.code || msg != tc.msg {
			t.Errorf("after %s: %d %q, want %d %q", tc.at, code, msg, tc.code, tc.msg)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "enrol")); len(entries) != 0 {
		t.Errorf("the expired link's file stays: %v", entries)
	}
}

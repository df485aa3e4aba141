// Package passkeytest is an approver of the team inbox without a
// browser: a software WebAuthn authenticator (ECDSA P-256, ES256) whose
// passkey is pinned as an enrolment pins it, and a signed-in session on
// the inbox's JSON API that answers cards with assertions, as the page
// does with the browser's passkey. For tests of what hosts the inbox
// (fulfiller mcp --inbox); the page itself is tested with a browser
// (internal/browsertest).
package passkeytest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/poll"
)

// Passkey is one approver's software authenticator.
type Passkey struct {
	key    *ecdsa.PrivateKey
	credID []byte
	rpID   string
	origin string
}

// New makes a passkey for the inbox at origin (relying party rpID).
func New(t testing.TB, rpID, origin string) *Passkey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &Passkey{key: key, credID: id, rpID: rpID, origin: origin}
}

// Pinned is the passkey as fulfiller pins it.
func (p *Passkey) Pinned(t testing.TB) approval.Passkey {
	t.Helper()
	pub, err := p.key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	cose, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: pub[1:33], YCoord: pub[33:],
	})
	if err != nil {
		t.Fatal(err)
	}
	return approval.Passkey{RPID: p.rpID, Origin: p.origin, CredentialID: p.credID, PublicKey: cose}
}

// Enrol appends approver's line for this passkey to dir's passkeys file
// (an --approver-keys line, as an enrolment writes it).
func (p *Passkey) Enrol(t testing.TB, dir, approver string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "passkeys"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %s %s\n", approver, approval.KeyTypeWebAuthn, approval.EncodePasskey(p.Pinned(t))); err != nil {
		t.Fatal(err)
	}
}

// Assert is what a browser's navigator.credentials.get() returns for
// challenge (base64url), with user presence.
func (p *Passkey) Assert(t testing.TB, challenge string) json.RawMessage {
	t.Helper()
	cd, _ := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": challenge, "origin": p.origin, "crossOrigin": false})
	rpHash := sha256.Sum256([]byte(p.rpID))
	authData := append(rpHash[:], 0x01) // UP
	authData = binary.BigEndian.AppendUint32(authData, 1)
	cdHash := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte{}, authData...), cdHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, p.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	out, _ := json.Marshal(map[string]any{
		"id": b64(p.credID), "rawId": b64(p.credID), "type": "public-key",
		"response": map[string]string{"authenticatorData": b64(authData), "clientDataJSON": b64(cd), "signature": b64(sig)},
	})
	return out
}

// Session is an approver signed in to the inbox's API at base (the
// address the test reaches it on; the passkey's origin is what the
// page's would be).
type Session struct {
	t        testing.TB
	base     string
	approver string
	pk       *Passkey
	http     *http.Client
}

// SignIn signs approver in with pk.
func SignIn(t testing.TB, base, approver string, pk *Passkey) *Session {
	t.Helper()
	return SignInWith(t, &http.Client{}, base, approver, pk)
}

// SignInWith signs approver in with pk through client (e.g. one that
// trusts an HTTPS inbox's certificate), giving it a cookie jar of its
// own for the session.
func SignInWith(t testing.TB, client *http.Client, base, approver string, pk *Passkey) *Session {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := *client
	c.Jar = jar
	s := &Session{t: t, base: base, approver: approver, pk: pk, http: &c}
	var begin ceremony
	if code, msg := s.post("/api/login/begin", map[string]any{"approver": approver}, &begin); code != http.StatusOK {
		t.Fatalf("sign-in of %s: %d %s", approver, code, msg)
	}
	if code, msg := s.post("/api/login/finish", map[string]any{"ceremony": begin.Ceremony, "credential": pk.Assert(t, begin.PublicKey.Challenge)}, nil); code != http.StatusOK {
		t.Fatalf("sign-in of %s: %d %s", approver, code, msg)
	}
	return s
}

// ceremony is a begin's answer: the challenge the passkey signs.
type ceremony struct {
	Ceremony  string `json:"ceremony"`
	PublicKey struct {
		Challenge string `json:"challenge"`
	} `json:"publicKey"`
}

// Card is a card as the API lists it.
type Card struct {
	Request  string `json:"request"`
	Proposal string `json:"proposal"`
	State    string `json:"state"`
	// Status is the card's state in words; Outcome what became of the
	// call once the approver approved it ("" until known).
	Status  string `json:"status"`
	Outcome string `json:"outcome"`
}

// OpenCard waits for one of the approver's cards to be open (poll.Until)
// and returns its request id.
func (s *Session) OpenCard() string {
	s.t.Helper()
	var req string
	poll.Until(s.t, s.approver+"'s card", func() bool {
		for _, c := range s.Cards() {
			if c.State == "open" {
				req = c.Request
				return true
			}
		}
		return false
	})
	return req
}

// Cards lists the approver's cards.
func (s *Session) Cards() []Card {
	s.t.Helper()
	resp, err := s.http.Get(s.base + "/api/cards")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Cards []Card `json:"cards"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		s.t.Fatalf("GET /api/cards: %s", resp.Status)
	}
	return out.Cards
}

// Answer answers the card of request as the page does: answer (the
// page's body without "request", e.g. {"action": "accept", "approve":
// true}) begun, signed by the passkey, finished. It returns the status
// and error of the step that failed (200 and "" when sent).
func (s *Session) Answer(request string, answer map[string]any) (int, string) {
	s.t.Helper()
	body := map[string]any{"request": request}
	for k, v := range answer {
		body[k] = v
	}
	var begin ceremony
	if code, msg := s.post("/api/answer/begin", body, &begin); code != http.StatusOK {
		return code, msg
	}
	return s.post("/api/answer/finish", map[string]any{"ceremony": begin.Ceremony, "credential": s.pk.Assert(s.t, begin.PublicKey.Challenge)}, nil)
}

// post sends a same-origin API call (the Origin the page's would have).
func (s *Session) post(path string, body any, out any) (int, string) {
	s.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, s.base+path, bytes.NewReader(b))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", s.pk.origin)
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return resp.StatusCode, e.Error
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s: %v", path, err)
		}
	}
	return resp.StatusCode, ""
}

// Origin is the origin of an inbox on base (http://127.0.0.1:PORT):
// http://localhost:PORT, as fulfiller mcp --inbox and inbox serve name
// it by default.
func Origin(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return "http://localhost:" + u.Port()
}

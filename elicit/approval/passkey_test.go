package approval

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
)

// softPasskey is a software WebAuthn authenticator (ECDSA P-256, ES256)
// that makes assertions the way a browser hands them to a page.
type softPasskey struct {
	key    *ecdsa.PrivateKey
	credID []byte
	rpID   string
	origin string
}

func newSoftPasskey(t *testing.T, rpID, origin string) *softPasskey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &softPasskey{key: key, credID: []byte("cred-" + rpID), rpID: rpID, origin: origin}
}

// pinned is the credential as fulfiller pins it.
func (a *softPasskey) pinned(t *testing.T) Passkey {
	t.Helper()
	pub, err := a.key.PublicKey.Bytes() // 0x04 || X || Y
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
	return Passkey{RPID: a.rpID, Origin: a.origin, CredentialID: a.credID, PublicKey: cose}
}

// assertion is what a browser's navigator.credentials.get() returns for
// challenge, as the JSON string content.signature carries. mutate may
// change the parts before signing, to make the malformed cases.
func (a *softPasskey) assertion(t *testing.T, challenge string, mutate func(cd map[string]any, authData []byte) []byte) string {
	t.Helper()
	cd := map[string]any{"type": "webauthn.get", "challenge": challenge, "origin": a.origin, "crossOrigin": false}
	rpHash := sha256.Sum256([]byte(a.rpID))
	authData := append(rpHash[:], 0x01) // UP
	authData = binary.BigEndian.AppendUint32(authData, 1)
	if mutate != nil {
		authData = mutate(cd, authData)
	}
	cdj, _ := json.Marshal(cd)
	cdHash := sha256.Sum256(cdj)
	digest := sha256.Sum256(append(append([]byte{}, authData...), cdHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, a.key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	out, _ := json.Marshal(map[string]any{
		"id": b64(a.credID), "rawId": b64(a.credID), "type": "public-key",
		"response": map[string]string{"authenticatorData": b64(authData), "clientDataJSON": b64(cdj), "signature": b64(sig)},
	})
	return string(out)
}

// withSignature adds content.signature to content (an object).
func withSignature(t *testing.T, content, sig string) json.RawMessage {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(content), &m); err != nil {
		t.Fatal(err)
	}
	m["signature"] = sig
	b, _ := json.Marshal(m)
	return b
}

// TestVerifyPasskey: an assertion whose challenge is the digest of the
// signed approval bytes verifies; one over anything else the answer could
// say (another request, call, action or content), from another origin,
// RP, credential or key, without user presence, or for registration
// instead of an assertion, does not.
func TestVerifyPasskey(t *testing.T) {
	const (
		requestID = "fulfiller-elicit-7"
		digest    = "029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32"
		content   = `{"approve":true,"reason":"ok"}`
	)
	a := newSoftPasskey(t, "localhost", "http://localhost:8765")
	pk := a.pinned(t)
	challenge, err := PasskeyChallenge(requestID, digest, "accept", json.RawMessage(content))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := SigningBytes(requestID, digest, "accept", json.RawMessage(content))
	sum := sha256.Sum256(msg)
	if want := base64.RawURLEncoding.EncodeToString(sum[:]); challenge != want {
		t.Fatalf("challenge %s, want SHA-256 of the signing bytes %s", challenge, want)
	}
	good := a.assertion(t, challenge, nil)
	if err := VerifyPasskey(pk, requestID, digest, "accept", withSignature(t, content, good)); err != nil {
		t.Fatalf("good assertion: %v", err)
	}
	// The relay's field order and spacing do not matter: the content is
	// canonicalised before hashing.
	if err := VerifyPasskey(pk, requestID, digest, "accept", withSignature(t, `{ "reason":"ok", "approve":true }`, good)); err != nil {
		t.Fatalf("reordered content: %v", err)
	}
	other := newSoftPasskey(t, "localhost", "http://localhost:8765")
	for name, tc := range map[string]struct {
		id, digest, action, content, sig string
		pk                               Passkey
		want                             string
	}{
		"other request":    {"fulfiller-elicit-8", digest, "accept", content, good, pk, "challenge"},
		"other call":       {requestID, strings.Repeat("0", 64), "accept", content, good, pk, "challenge"},
		"other action":     {requestID, digest, "decline", content, good, pk, "challenge"},
		"edited content":   {requestID, digest, "accept", `{"approve":true,"reason":"ok!"}`, good, pk, "challenge"},
		"added field":      {requestID, digest, "accept", `{"approve":true,"reason":"ok","path":"/"}`, good, pk, "challenge"},
		"other key":        {requestID, digest, "accept", content, good, other.pinned(t), "signature"},
		"other origin":     {requestID, digest, "accept", content, a.assertion(t, challenge, func(cd map[string]any, ad []byte) []byte { cd["origin"] = "http://localhost:9999"; return ad }), pk, "origin"},
		"registration":     {requestID, digest, "accept", content, a.assertion(t, challenge, func(cd map[string]any, ad []byte) []byte { cd["type"] = "webauthn.create"; return ad }), pk, "ceremony"},
		"cross origin":     {requestID, digest, "accept", content, a.assertion(t, challenge, func(cd map[string]any, ad []byte) []byte { cd["crossOrigin"] = true; return ad }), pk, "cross origin"},
		"no user present":  {requestID, digest, "accept", content, a.assertion(t, challenge, func(cd map[string]any, ad []byte) []byte { ad[32] = 0; return ad }), pk, "presence"},
		"other rp":         {requestID, digest, "accept", content, newSoftPasskey(t, "example.com", "http://localhost:8765").assertion(t, challenge, nil), Passkey{RPID: "localhost", Origin: pk.Origin, CredentialID: []byte("cred-example.com"), PublicKey: pk.PublicKey}, "RP Hash"},
		"not json":         {requestID, digest, "accept", content, "6AvPeETHmmFkyjDUS9kiLMzi5uL8bTfZbVZVsiHBnlSyBSRQzFvxozrjYSHd0vkxDV1FPYfKei6sow8s707CCw", pk, "not a WebAuthn assertion"},
		"other credential": {requestID, digest, "accept", content, good, Passkey{RPID: pk.RPID, Origin: pk.Origin, CredentialID: []byte("another"), PublicKey: pk.PublicKey}, "another credential"},
	} {
		err := VerifyPasskey(tc.pk, tc.id, tc.digest, tc.action, withSignature(t, tc.content, tc.sig))
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
			t.Errorf("%s: %v, want ErrBadSignature mentioning %q", name, err, tc.want)
		}
	}
	if err := VerifyPasskey(pk, requestID, digest, "accept", json.RawMessage(content)); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	// A decline signs {}: its content holds only the signature.
	declined, _ := PasskeyChallenge(requestID, digest, "decline", nil)
	if err := VerifyPasskey(pk, requestID, digest, "decline", withSignature(t, `{}`, a.assertion(t, declined, nil))); err != nil {
		t.Errorf("signed decline: %v", err)
	}
}

// TestParseApproverKeys: both kinds of line, a passkey line round-trips,
// and each wrong line names itself.
func TestParseApproverKeys(t *testing.T) {
	pk := newSoftPasskey(t, "inbox.example.com", "https://inbox.example.com").pinned(t)
	line := EncodePasskey(pk)
	keys, err := ParseApproverKeys(strings.NewReader("# keys\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n\nbob webauthn " + line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := keys.IDs(); strings.Join(got, ",") != "alice,bob" {
		t.Errorf("ids %v", got)
	}
	if got := EncodePasskey(keys.Passkeys["bob"]); got != line {
		t.Errorf("round trip %s, want %s", got, line)
	}
	if !keys.Has("alice") || !keys.Has("bob") || keys.Has("carol") {
		t.Errorf("Has: %+v", keys)
	}
	for name, tc := range map[string]struct{ in, want string }{
		"twice":         {"bob webauthn " + line + "\nbob iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n", "line 2: approver bob is listed twice"},
		"other type":    {"bob fido " + line + "\n", "line 1: want `<approver id> <base64url Ed25519 public key>` or `<approver id> webauthn <credential>`, got 3 fields"},
		"three parts":   {"bob webauthn a,b,c\n", "line 1: passkey of bob: want `<rp id>,<origin>,<credential id>,<COSE public key>`"},
		"origin off rp": {"bob webauthn example.com,https://evil.test,YQ,YQ\n", "line 1: passkey of bob: origin https://evil.test is not within rp id example.com"},
		"bad cose":      {"bob webauthn example.com,https://example.com,YQ,YQ\n", "line 1: passkey of bob: public key is not a COSE key"},
		"origin path":   {"bob webauthn example.com,https://example.com/x,YQ,YQ\n", "line 1: passkey of bob: origin \"https://example.com/x\" is not scheme://host[:port]"},
	} {
		_, err := ParseApproverKeys(strings.NewReader(tc.in))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s", name, err, tc.want)
		}
	}
}

package approval

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestSignatureVector is the test vector of docs/protocol.md ("Signed
// approvals"), reproduced there with two independent implementations.
func TestSignatureVector(t *testing.T) {
	const (
		wantPub    = "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"
		wantCanon  = `{"method":"tools/call","params":{"arguments":{"confirm":true,"path":"/var/data"},"name":"delete_all"}}`
		wantDigest = "029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32"
		requestID  = "fulfiller-elicit-7"
		wantSig    = "6AvPeETHmmFkyjDUS9kiLMzi5uL8bTfZbVZVsiHBnlSyBSRQzFvxozrjYSHd0vkxDV1FPYfKei6sow8s707CCw"
	)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x01}, 32))
	pub := key.Public().(ed25519.PublicKey)
	if got := EncodePublicKey(pub); got != wantPub {
		t.Errorf("public key %s, want %s", got, wantPub)
	}
	// The proposal as a proposer might write it: other key order, spaces.
	params := json.RawMessage(`{ "name": "delete_all", "arguments": { "path": "/var/data", "confirm": true } }`)
	canon, err := Canonical([]byte(`{"params":` + string(params) + `,"method":"tools/call"}`))
	if err != nil || string(canon) != wantCanon {
		t.Errorf("canonical call %s %v, want %s", canon, err, wantCanon)
	}
	digest, err := CallDigest("tools/call", params)
	if err != nil || digest != wantDigest {
		t.Fatalf("digest %s %v, want %s", digest, err, wantDigest)
	}
	sig, err := Sign(key, requestID, digest, "accept", json.RawMessage(`{"reason":"ok","approve":true}`))
	if err != nil || sig != wantSig {
		t.Fatalf("signature %s %v, want %s", sig, err, wantSig)
	}
	content := json.RawMessage(`{"approve":true,"reason":"ok","signature":"` + wantSig + `"}`)
	if err := Verify(pub, requestID, digest, "accept", content); err != nil {
		t.Errorf("verify: %v", err)
	}
	for name, tc := range map[string]struct {
		id, digest, action string
		content            string
	}{
		"other request":  {"fulfiller-elicit-8", digest, "accept", string(content)},
		"other call":     {requestID, strings.Repeat("0", 64), "accept", string(content)},
		"other action":   {requestID, digest, "decline", string(content)},
		"edited content": {requestID, digest, "accept", `{"approve":true,"reason":"ok!","signature":"` + wantSig + `"}`},
		"added field":    {requestID, digest, "accept", `{"approve":true,"reason":"ok","path":"/","signature":"` + wantSig + `"}`},
	} {
		if err := Verify(pub, tc.id, tc.digest, tc.action, json.RawMessage(tc.content)); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	if err := Verify(pub, requestID, digest, "accept", json.RawMessage(`{"approve":true,"reason":"ok"}`)); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	if err := Verify(pub, requestID, digest, "accept", json.RawMessage(`{"approve":true,"signature":"!!"}`)); !errors.Is(err, ErrBadSignature) {
		t.Errorf("garbage signature: %v", err)
	}
	if err := Verify(pub, requestID, digest, "accept", json.RawMessage(`{"approve":true,"approve":false,"signature":"`+wantSig+`"}`)); err == nil {
		t.Error("content with a duplicate key verified")
	}
}

func TestSignedDeclineSignsEmptyContent(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x02}, 32))
	sig, err := Sign(key, "fulfiller-elicit-1", "d", ActionDecline, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := SigningBytes("fulfiller-elicit-1", "d", ActionDecline, nil)
	if string(msg) != "mew-approval/v1\nfulfiller-elicit-1\nd\ndecline\n{}" {
		t.Errorf("signed bytes %q", msg)
	}
	pub := key.Public().(ed25519.PublicKey)
	if err := Verify(pub, "fulfiller-elicit-1", "d", ActionDecline, json.RawMessage(`{"signature":"`+sig+`"}`)); err != nil {
		t.Errorf("verify decline: %v", err)
	}
	if err := Verify(pub, "fulfiller-elicit-1", "d", ActionDecline, nil); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned decline: %v", err)
	}
}

func TestParseKeys(t *testing.T) {
	keys, err := ParseKeys(strings.NewReader("# approvers\n\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n  bob   iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if ids := keys.IDs(); len(ids) != 2 || ids[0] != "alice" || ids[1] != "bob" {
		t.Errorf("ids %v", ids)
	}
	for name, tc := range map[string]struct{ text, want string }{
		"one field":    {"alice\n", "line 1: want `<approver id> <base64url Ed25519 public key>`, got 1 fields"},
		"three":        {"# c\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w extra\n", "line 2: want `<approver id> <base64url Ed25519 public key>`, got 3 fields"},
		"not base64":   {"alice ***\n", "line 1: key of alice: not base64url without padding"},
		"padded":       {"alice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=\n", "line 1: key of alice: not base64url without padding"},
		"short":        {"alice AAAA\n", "line 1: key of alice: 3 bytes, an Ed25519 public key has 32"},
		"listed twice": {"alice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\nalice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\n", "line 2: approver alice is listed twice"},
	} {
		_, err := ParseKeys(strings.NewReader(tc.text))
		var ke *KeyFileError
		if !errors.As(err, &ke) || err.Error() != tc.want {
			t.Errorf("%s: %v, want %s", name, err, tc.want)
		}
	}
}

func TestLoadKeysNamesFileAndLine(t *testing.T) {
	path := t.TempDir() + "/keys"
	if err := writeFile(path, "alice iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w\nbob no!pe\n"); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKeys(path)
	if err == nil || err.Error() != path+":2: key of bob: not base64url without padding" {
		t.Errorf("error %v", err)
	}
}

// promptVectorParams are the params of the prompt test vector of
// docs/protocol.md ("Signed prompts"), as a fulfiller writes them.
const promptVectorParams = `{"message":"coder wants to call delete_all on fs with {\"confirm\":true,\"path\":\"/var/data\"}. Call digest 029cd4a2f365.","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean","title":"Approve?"}},"required":["approve"]},"_meta":{"proposal":{"id":"p-delete-1","from":"coder","method":"tools/call","params":{"name":"delete_all","arguments":{"path":"/var/data","confirm":true}},"digest":"029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32","deadline":"2026-11-22T10:05:00Z"}}}`

// TestPromptSignatureVector is the prompt test vector of docs/protocol.md
// ("Signed prompts"); the signature was also computed with Python's
// cryptography package over the bytes written out by hand.
func TestPromptSignatureVector(t *testing.T) {
	const (
		wantPub    = "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"
		digest     = "029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32"
		requestID  = "fulfiller-elicit-7"
		wantCanon  = `{"_meta":{"proposal":{"deadline":"2026-11-22T10:05:00Z","digest":"029cd4a2f3650372e27e288716794b68dfb21e188c737b1feddc399affd4ee32","from":"coder","id":"p-delete-1","method":"tools/call","params":{"arguments":{"confirm":true,"path":"/var/data"},"name":"delete_all"}}},"message":"coder wants to call delete_all on fs with {\"confirm\":true,\"path\":\"/var/data\"}. Call digest 029cd4a2f365.","requestedSchema":{"properties":{"approve":{"title":"Approve?","type":"boolean"}},"required":["approve"],"type":"object"}}`
		wantSHA256 = "fffa888551f9282b3f926c4cbd6d55eba7076b616a629d1bc1edadd28a467c66"
		wantSig    = "QxVXrBEaNAEX6yc_NNJmHoUVBSeCqm2hwU82EPtDNFtp-baeefuR3b5B-FZ3BeYfXC-OoyPRhXZoZDcUxAt3Bw"
	)
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x02}, 32))
	pub := key.Public().(ed25519.PublicKey)
	if got := EncodePublicKey(pub); got != wantPub {
		t.Errorf("public key %s, want %s", got, wantPub)
	}
	msg, err := PromptSigningBytes(requestID, json.RawMessage(`7`), "alice", digest, json.RawMessage(promptVectorParams))
	if err != nil {
		t.Fatal(err)
	}
	if want := "mew-prompt/v1\nfulfiller-elicit-7\n7\nalice\n" + digest + "\n" + wantCanon; string(msg) != want {
		t.Errorf("signed bytes\n%s\nwant\n%s", msg, want)
	}
	if sum := sha256.Sum256(msg); hex.EncodeToString(sum[:]) != wantSHA256 {
		t.Errorf("SHA-256 of the signed bytes %x, want %s", sum, wantSHA256)
	}
	sig, err := SignPrompt(key, requestID, json.RawMessage(`7`), "alice", digest, json.RawMessage(promptVectorParams))
	if err != nil || sig != wantSig {
		t.Fatalf("signature %s %v, want %s", sig, err, wantSig)
	}

	keys := Keys{"fulfiller": pub}
	signed := func(params string) json.RawMessage {
		return json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":` + params + `}`)
	}
	sigMeta := `"fulfiller/signature":{"signer":"fulfiller","signature":"` + wantSig + `"}`
	good := strings.Replace(promptVectorParams, `"_meta":{`, `"_meta":{`+sigMeta+`,`, 1)
	if signer, err := VerifyPrompt(keys, requestID, "alice", signed(good)); err != nil || signer != "fulfiller" {
		t.Fatalf("verify: %q %v", signer, err)
	}
	// The signature is found wherever it sits in _meta, and the key order
	// and spacing of the rest do not matter (canonical JSON).
	if _, err := VerifyPrompt(keys, requestID, "alice", signed(strings.Replace(promptVectorParams, `"deadline":"2026-11-22T10:05:00Z"}}`, `"deadline":"2026-11-22T10:05:00Z"}, `+sigMeta+` }`, 1))); err != nil {
		t.Errorf("signature last in _meta: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	for name, tc := range map[string]struct {
		keys             Keys
		requestID, alice string
		payload          json.RawMessage
		want             error
	}{
		"other envelope id":  {keys, "fulfiller-elicit-8", "alice", signed(good), ErrPromptBadSignature},
		"other approver":     {keys, requestID, "bob", signed(good), ErrPromptBadSignature},
		"other JSON-RPC id":  {keys, requestID, "alice", json.RawMessage(strings.Replace(string(signed(good)), `"id":7`, `"id":8`, 1)), ErrPromptBadSignature},
		"other call":         {keys, requestID, "alice", signed(strings.Replace(good, `/var/data"`, `/etc/sudoers"`, 1)), ErrPromptBadSignature},
		"other message":      {keys, requestID, "alice", signed(strings.Replace(good, `Call digest`, `Digest`, 1)), ErrPromptBadSignature},
		"unsigned":           {keys, requestID, "alice", signed(promptVectorParams), ErrPromptUnsigned},
		"signer not pinned":  {keys, requestID, "alice", signed(strings.Replace(good, `"signer":"fulfiller"`, `"signer":"mallory"`, 1)), ErrPromptUnknownKey},
		"another key pinned": {Keys{"fulfiller": other}, requestID, "alice", signed(good), ErrPromptBadSignature},
	} {
		if _, err := VerifyPrompt(tc.keys, tc.requestID, tc.alice, tc.payload); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	// A duplicate key would let the client read another value than the
	// one verified.
	dup := strings.Replace(good, `"message":"coder`, `"message":"x","message":"coder`, 1)
	if _, err := VerifyPrompt(keys, requestID, "alice", signed(dup)); !errors.Is(err, ErrNotCanonicalizable) {
		t.Errorf("duplicate key: %v, want ErrNotCanonicalizable", err)
	}
}

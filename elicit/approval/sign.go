package approval

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// SignatureDomain starts every signed approval, so that an approver's key
// signs nothing else by accident (see docs/protocol.md, "Signed approvals").
const SignatureDomain = "mew-approval/v1"

// errNotObject means a JSON value that must be an object is not one.
var errNotObject = errors.New("not a JSON object")

// Errors of signature checks. They never carry the signature itself.
var (
	ErrUnsigned     = errors.New("answer is not signed")
	ErrBadSignature = errors.New("signature does not verify")
)

// SigningBytes are the exact bytes an approver signs:
//
//	mew-approval/v1\n<elicitation envelope id>\n<call digest>\n<action>\n<canonical content>
//
// content is the answer's content without "signature"; nil means {} (what
// decline and cancel answers sign).
func SigningBytes(requestID, digest, action string, content json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(content)) == 0 {
		content = json.RawMessage(`{}`)
	}
	c, err := Canonical(content)
	if err != nil {
		return nil, fmt.Errorf("signed content: %w", err)
	}
	if len(c) == 0 || c[0] != '{' {
		return nil, fmt.Errorf("signed content: %w", errNotObject)
	}
	var b bytes.Buffer
	for _, part := range []string{SignatureDomain, requestID, digest, action} {
		b.WriteString(part)
		b.WriteByte('\n')
	}
	b.Write(c)
	return b.Bytes(), nil
}

// Sign signs an answer for the approver's client: content is the answer's
// content without a signature (nil for decline and cancel). It returns the
// signature as base64url without padding, ready for content.signature.
func Sign(key ed25519.PrivateKey, requestID, digest, action string, content json.RawMessage) (string, error) {
	msg, err := SigningBytes(requestID, digest, action, content)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, msg)), nil
}

// SplitSignature takes "signature" out of an answer's content. It returns
// the canonical JSON of the rest ({} when nothing else is there) and the
// signature string ("" when absent). The content must be canonicalizable
// (no duplicate keys), so that what is verified is what is acted on.
func SplitSignature(content json.RawMessage) (rest json.RawMessage, signature string, err error) {
	if len(bytes.TrimSpace(content)) == 0 || string(bytes.TrimSpace(content)) == "null" {
		return json.RawMessage(`{}`), "", nil
	}
	if _, err := Canonical(content); err != nil {
		return nil, "", fmt.Errorf("content: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(content, &fields); err != nil || fields == nil {
		return nil, "", fmt.Errorf("content: %w", errNotObject)
	}
	if raw, ok := fields[FieldSignature]; ok {
		if err := json.Unmarshal(raw, &signature); err != nil {
			return nil, "", errors.New("content: signature is not a string")
		}
		delete(fields, FieldSignature)
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, "", fmt.Errorf("content: %w", err)
	}
	rest, err = Canonical(b)
	if err != nil {
		return nil, "", fmt.Errorf("content: %w", err)
	}
	return rest, signature, nil
}

// Verify checks the signature in an answer's content (content as received,
// signature included) against the approver's public key.
func Verify(pub ed25519.PublicKey, requestID, digest, action string, content json.RawMessage) error {
	rest, sig, err := SplitSignature(content)
	if err != nil {
		return err
	}
	if sig == "" {
		return ErrUnsigned
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: not %d bytes of base64url", ErrBadSignature, ed25519.SignatureSize)
	}
	msg, err := SigningBytes(requestID, digest, action, rest)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, raw) {
		return ErrBadSignature
	}
	return nil
}

// Keys maps an approver id to the Ed25519 public key whose signature their
// answers must carry. An approver without a key is taken on the gateway's
// word.
type Keys map[string]ed25519.PublicKey

// IDs returns the approvers that have keys, sorted.
func (k Keys) IDs() []string {
	ids := make([]string, 0, len(k))
	for id := range k {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// EncodePublicKey writes a public key as the keys file holds it: base64url
// without padding.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.RawURLEncoding.EncodeToString(pub)
}

// DecodePublicKey reads a public key as the keys file holds it.
func DecodePublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not base64url without padding")
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%d bytes, an Ed25519 public key has %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// KeyFileError says which line of an approver keys file is wrong.
type KeyFileError struct {
	File string // "" when read from a stream
	Line int
	Err  error
}

// Error names the file and line, so an operator can fix the one entry.
func (e *KeyFileError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

// Unwrap returns the cause.
func (e *KeyFileError) Unwrap() error { return e.Err }

// ParseKeys reads an approver keys file: one `<approver id> <public key>`
// per line; blank lines and lines starting with # are skipped. An approver
// listed twice is an error rather than "last one wins", because either
// entry could be the stale one.
func ParseKeys(r io.Reader) (Keys, error) {
	keys := Keys{}
	err := scanKeyLines(r, func(f []string) error {
		if len(f) != 2 {
			return fmt.Errorf("want `<approver id> <base64url Ed25519 public key>`, got %d fields", len(f))
		}
		pub, err := DecodePublicKey(f[1])
		if err != nil {
			return fmt.Errorf("key of %s: %w", f[0], err)
		}
		if _, dup := keys[f[0]]; dup {
			return fmt.Errorf("approver %s is listed twice", f[0])
		}
		keys[f[0]] = pub
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// scanKeyLines calls line with the fields of each line of a keys file
// that is neither blank nor a # comment; an error it returns, or one
// reading, comes back as a *KeyFileError naming the line.
func scanKeyLines(r io.Reader, line func(fields []string) error) error {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if err := line(strings.Fields(text)); err != nil {
			return &KeyFileError{Line: n, Err: err}
		}
	}
	if err := sc.Err(); err != nil {
		return &KeyFileError{Line: n + 1, Err: err}
	}
	return nil
}

// loadKeyFile opens path and parses it with parse; a *KeyFileError gets
// the file's name.
func loadKeyFile[K any](path string, parse func(io.Reader) (K, error)) (K, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero K
		return zero, err
	}
	defer f.Close()
	keys, err := parse(f)
	var ke *KeyFileError
	if errors.As(err, &ke) {
		ke.File = path
	}
	return keys, err
}

// LoadKeys reads the approver keys file at path. Errors name the file, and
// the line when one is wrong.
func LoadKeys(path string) (Keys, error) {
	return loadKeyFile(path, ParseKeys)
}

// PromptSignatureDomain starts every signed prompt: a fulfiller's prompt
// key signs nothing that could be read as an approval or anything else
// (see docs/protocol.md, "Signed prompts").
const PromptSignatureDomain = "mew-prompt/v1"

// MetaPromptSignature is the key in an elicitation's params._meta that
// carries its signature: {"signer": "<fulfiller id>", "signature":
// "<base64url>"}. It is the one member left out of the signed params.
const MetaPromptSignature = "fulfiller/signature"

// Errors of prompt signature checks.
var (
	ErrPromptUnsigned     = errors.New("the prompt is not signed")
	ErrPromptUnknownKey   = errors.New("the prompt is signed by a fulfiller whose key is not pinned")
	ErrPromptBadSignature = errors.New("the prompt's signature does not verify")
)

// PromptSigningBytes are the exact bytes a fulfiller signs for one
// elicitation/create, with no trailing newline:
//
//	mew-prompt/v1\n<elicitation envelope id>\n<JSON-RPC id>\n<approver>\n<call digest>\n<canonical params>
//
// The JSON-RPC id is written as canonical JSON (7, or "abc" with its
// quotes); params are the request's params without
// _meta["fulfiller/signature"]. The envelope id, the JSON-RPC id and the
// approver are outside params, so they are named: a signed prompt cannot
// be replayed under other ids or to another approver.
func PromptSigningBytes(requestID string, rpcID json.RawMessage, approver, digest string, params json.RawMessage) ([]byte, error) {
	id, err := Canonical(rpcID)
	if err != nil {
		return nil, fmt.Errorf("prompt JSON-RPC id: %w", err)
	}
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		return nil, errors.New("prompt JSON-RPC id: not a string or a number")
	}
	p, err := Canonical(params)
	if err != nil {
		return nil, fmt.Errorf("prompt params: %w", err)
	}
	if len(p) == 0 || p[0] != '{' {
		return nil, fmt.Errorf("prompt params: %w", errNotObject)
	}
	for _, part := range []string{requestID, approver, digest} {
		if strings.ContainsAny(part, "\n") {
			return nil, errors.New("prompt: an id or digest holds a newline")
		}
	}
	var b bytes.Buffer
	for _, part := range []string{PromptSignatureDomain, requestID, string(id), approver, digest} {
		b.WriteString(part)
		b.WriteByte('\n')
	}
	b.Write(p)
	return b.Bytes(), nil
}

// SignPrompt signs an elicitation's params (without a signature) for the
// approver it is addressed to, and returns the signature as base64url
// without padding, for _meta["fulfiller/signature"].signature.
func SignPrompt(key ed25519.PrivateKey, requestID string, rpcID json.RawMessage, approver, digest string, params json.RawMessage) (string, error) {
	msg, err := PromptSigningBytes(requestID, rpcID, approver, digest, params)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(key, msg)), nil
}

// VerifyPrompt checks the signature of an elicitation/create payload (as
// received) sent under envelope id requestID to approver, against the
// pinned fulfiller keys. It returns the fulfiller whose key signed it.
// The params must be canonicalizable (no duplicate keys), so that what
// is verified is what the approver's client reads; the call digest signed
// is params._meta.proposal.digest, the one the card shows.
func VerifyPrompt(keys Keys, requestID, approver string, payload json.RawMessage) (signer string, err error) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		return "", fmt.Errorf("prompt: %w", err)
	}
	if _, err := Canonical(req.Params); err != nil {
		return "", fmt.Errorf("prompt params: %w", err)
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(req.Params, &params); err != nil || params == nil {
		return "", fmt.Errorf("prompt params: %w", errNotObject)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(params["_meta"], &meta); err != nil || meta == nil {
		return "", ErrPromptUnsigned
	}
	raw, ok := meta[MetaPromptSignature]
	if !ok {
		return "", ErrPromptUnsigned
	}
	var sig struct {
		Signer    string `json:"signer"`
		Signature string `json:"signature"`
	}
	if err := json.Unmarshal(raw, &sig); err != nil || sig.Signature == "" {
		return "", fmt.Errorf("%w: _meta[%q] is not {signer, signature}", ErrPromptBadSignature, MetaPromptSignature)
	}
	pub, ok := keys[sig.Signer]
	if !ok {
		return "", fmt.Errorf("%w (%q)", ErrPromptUnknownKey, sig.Signer)
	}
	var proposal struct {
		Proposal struct {
			Digest string `json:"digest"`
		} `json:"proposal"`
	}
	_ = json.Unmarshal(params["_meta"], &proposal)
	delete(meta, MetaPromptSignature)
	m, err := json.Marshal(meta)
	if err != nil {
		return "", fmt.Errorf("prompt params: %w", err)
	}
	params["_meta"] = m
	rest, err := json.Marshal(params)
	if err != nil {
		return "", fmt.Errorf("prompt params: %w", err)
	}
	s, err := base64.RawURLEncoding.DecodeString(sig.Signature)
	if err != nil || len(s) != ed25519.SignatureSize {
		return "", fmt.Errorf("%w: not %d bytes of base64url", ErrPromptBadSignature, ed25519.SignatureSize)
	}
	msg, err := PromptSigningBytes(requestID, req.ID, approver, proposal.Proposal.Digest, rest)
	if err != nil {
		return "", err
	}
	if !ed25519.Verify(pub, msg, s) {
		return "", ErrPromptBadSignature
	}
	return sig.Signer, nil
}

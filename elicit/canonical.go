package elicit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ErrNotCanonicalizable means a document cannot be put into RFC 8785 form:
// it is not UTF-8 JSON, or it is outside I-JSON (duplicate keys, lone
// surrogates, numbers beyond IEEE 754 doubles).
var ErrNotCanonicalizable = errors.New("not canonicalizable JSON")

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON document: keys sorted by UTF-16 code units, no insignificant
// whitespace, ECMAScript number formatting and minimal string escaping.
// Digests and signatures are computed over these bytes, so that the
// fulfiller and an approver's client written in another language agree on
// them whatever key order or spelling the JSON travelled in.
//
// The transformation itself is github.com/gowebpki/jcs. That parser accepts
// some input that is not JSON (01, 1_0), so the document is checked with
// encoding/json first.
func Canonical(doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) {
		return nil, fmt.Errorf("%w: not UTF-8", ErrNotCanonicalizable)
	}
	if !json.Valid(doc) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrNotCanonicalizable)
	}
	out, err := jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	return out, nil
}

// CallDigest is the lowercase hex SHA-256 of the canonical JSON of
// {"method": method, "params": params} ("params": null when the proposal
// had none). It names the exact call a human is asked about: the card shows
// its first 12 digits, and a signed approval covers all of it, so an answer
// cannot be replayed for a look-alike call.
func CallDigest(method string, params json.RawMessage) (string, error) {
	m, err := marshal(method)
	if err != nil {
		return "", err
	}
	p := bytes.TrimSpace(params)
	if len(p) == 0 {
		p = []byte("null")
	}
	doc := make([]byte, 0, len(m)+len(p)+24)
	doc = append(doc, `{"method":`...)
	doc = append(doc, m...)
	doc = append(doc, `,"params":`...)
	doc = append(doc, p...)
	doc = append(doc, '}')
	c, err := Canonical(doc)
	if err != nil {
		return "", fmt.Errorf("call digest: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// ShortDigest is the prefix of a call digest that humans compare: enough
// to tell two look-alike proposals apart at a glance.
func ShortDigest(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// marshal is json.Marshal without HTML escaping: messages and arguments
// are shown to people and compared byte for byte in tests, and `<`, `>`,
// `&` need no escaping in JSON.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// mustMarshal is marshal for values built from JSON-safe types only.
func mustMarshal(v any) json.RawMessage {
	b, err := marshal(v)
	if err != nil {
		panic(fmt.Sprintf("elicit: value does not marshal: %v", err))
	}
	return b
}

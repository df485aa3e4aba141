package state

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// maxPlainID is the longest id whose key is reversible (base64url). Longer
// ids are hashed: NATS subjects have a practical length limit, and a hostile
// proposer chooses proposal ids.
const maxPlainID = 180

// key maps an arbitrary id (dots, wildcards, spaces, any bytes) onto one
// valid KV key token. "b" + base64url (no padding) for ids up to maxPlainID
// bytes, else "h" + hex SHA-256. The prefixes keep the two spaces disjoint;
// the base64url and hex alphabets are both within the KV key alphabet, and
// neither can produce "." or a wildcard, so an id can never address another
// key or a subject range.
func key(id string) string {
	if len(id) <= maxPlainID {
		return "b" + base64.RawURLEncoding.EncodeToString([]byte(id))
	}
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:])
}

// idOf reverses key for reversible keys; ok is false for hashed or foreign
// keys.
func idOf(k string) (string, bool) {
	rest, found := strings.CutPrefix(k, "b")
	if !found {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// bucketName is the KV bucket for one kind of record in one space. Bucket
// names allow only [A-Za-z0-9_-]; the space name is arbitrary, so it is
// reduced to that alphabet (capped at 32 characters for readability in
// `nats kv ls`) and suffixed with a hash of the exact name, so that spaces
// "a.b" and "a_b" never share a bucket.
func bucketName(kind, space string) string {
	var b strings.Builder
	for _, r := range space {
		if b.Len() >= 32 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(space))
	return "fulfiller_" + kind + "_" + b.String() + "_" + hex.EncodeToString(sum[:4])
}

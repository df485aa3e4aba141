// Package teaminbox is one approval inbox for every approver of a space
// (`fulfiller inbox serve`): each approver enrols a passkey through a
// one-time link, signs in with it, sees only the prompts addressed to them,
// and answers with a WebAuthn assertion whose challenge is the digest of
// the signed approval bytes (docs/protocol.md, "Signed approvals"). The
// server relays that assertion as content.signature; fulfiller verifies it
// against the passkey pinned in --approver-keys, so the server cannot make
// or change an approval.
package teaminbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// Files of the inbox's directory (Options.Dir):
//
//	passkeys       the enrolled passkeys, as --approver-keys lines
//	enrol/<hash>   a pending enrolment: SHA-256 of its token, hex
//	tokens/<id>    the approver's MEW participant token (the operator's)
const (
	PasskeysFile = "passkeys"
	enrolDir     = "enrol"
	tokensDir    = "tokens"
)

// approverID is what an approver id may be here: it names files.
var approverID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidApproverID reports whether id can be enrolled here: letters,
// digits, '.', '_' and '-', at most 64, starting with a letter or digit
// (it names files in the inbox's directory).
func ValidApproverID(id string) bool { return approverID.MatchString(id) }

// ErrEnrolment is any failure of an enrolment token: unknown, used or
// expired alike, so that the answer tells a guesser nothing.
var ErrEnrolment = errors.New("the enrolment link is unknown, used or expired")

// pendingEnrolment is what enrol/<hash> holds.
type pendingEnrolment struct {
	Approver string    `json:"approver"`
	Expires  time.Time `json:"expires"`
}

// CreateEnrolment makes a one-time enrolment token for approver, valid for
// ttl, and records only its hash in dir: the token itself is shown once
// (to the operator, who hands the link to the approver) and is never
// stored or logged.
func CreateEnrolment(dir, approver string, ttl time.Duration, now time.Time) (string, error) {
	if !approverID.MatchString(approver) {
		return "", fmt.Errorf("approver id %q: want letters, digits, '.', '_' or '-' (at most 64)", approver)
	}
	if err := os.MkdirAll(filepath.Join(dir, enrolDir), 0o700); err != nil {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := base64.RawURLEncoding.EncodeToString(raw)
	_ = SweepEnrolments(dir, now) // the expired links go as a new one comes
	b, _ := json.Marshal(pendingEnrolment{Approver: approver, Expires: now.Add(ttl).UTC()})
	if err := os.WriteFile(filepath.Join(dir, enrolDir, tokenHash(token)), b, 0o600); err != nil {
		return "", err
	}
	return token, nil
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// lookupEnrolment returns whom the token enrols, without using it up.
func lookupEnrolment(dir, token string, now time.Time) (string, error) {
	if token == "" {
		return "", ErrEnrolment
	}
	b, err := os.ReadFile(filepath.Join(dir, enrolDir, tokenHash(token)))
	if err != nil {
		return "", ErrEnrolment
	}
	var p pendingEnrolment
	if json.Unmarshal(b, &p) != nil || !now.Before(p.Expires) || !approverID.MatchString(p.Approver) {
		// Refused for good: the link is gone, as its expiry says.
		_ = os.Remove(filepath.Join(dir, enrolDir, tokenHash(token)))
		return "", ErrEnrolment
	}
	return p.Approver, nil
}

// SweepEnrolments removes the enrolment links of dir that expired by now
// (or that cannot be read as one): an expired link is never honoured,
// and its file does not stay. Errors are the directory's; a file that
// cannot be removed is left for the next sweep.
func SweepEnrolments(dir string, now time.Time) error {
	entries, err := os.ReadDir(filepath.Join(dir, enrolDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(dir, enrolDir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var p pendingEnrolment
		if json.Unmarshal(b, &p) != nil || !now.Before(p.Expires) {
			_ = os.Remove(path)
		}
	}
	return nil
}

// useEnrolment uses the token up: removing its file is the single use (of
// two racing finishes, only one removes it).
func useEnrolment(dir, token string, now time.Time) (string, error) {
	id, err := lookupEnrolment(dir, token, now)
	if err != nil {
		return "", err
	}
	if err := os.Remove(filepath.Join(dir, enrolDir, tokenHash(token))); err != nil {
		return "", ErrEnrolment
	}
	return id, nil
}

// LoadPasskeys reads the enrolled passkeys of dir (none when the file is
// not there yet).
func LoadPasskeys(dir string) (approval.Passkeys, error) {
	keys, err := approval.LoadApproverKeys(filepath.Join(dir, PasskeysFile))
	if errors.Is(err, os.ErrNotExist) {
		return approval.Passkeys{}, nil
	}
	if err != nil {
		return nil, err
	}
	return keys.Passkeys, nil
}

// appendPasskey adds an enrolled passkey to dir's passkeys file, replacing
// the approver's earlier one (a re-enrolment is how a lost key is
// replaced).
func appendPasskey(dir, approver string, p approval.Passkey) error {
	keys, err := LoadPasskeys(dir)
	if err != nil {
		return err
	}
	keys[approver] = p
	return writePasskeys(dir, keys)
}

// RevokePasskey removes approver's passkey from dir's passkeys file
// (`fulfiller inbox revoke ID`): a running inbox ends every session of
// theirs, and fulfiller run, reloading the file as --approver-keys, stops
// counting it. Revoking the last passkey writes a file that says so
// (approval.NoKeysLine), which run takes; an empty one it would refuse.
func RevokePasskey(dir, approver string) error {
	keys, err := LoadPasskeys(dir)
	if err != nil {
		return err
	}
	if _, ok := keys[approver]; !ok {
		return fmt.Errorf("%s has no passkey in %s", approver, filepath.Join(dir, PasskeysFile))
	}
	delete(keys, approver)
	return writePasskeys(dir, keys)
}

// writePasskeys replaces dir's passkeys file with keys, renamed into
// place whole (fulfiller run may reload it at any moment).
func writePasskeys(dir string, keys approval.Passkeys) error {
	out := []byte("# Enrolled by fulfiller inbox serve: --approver-keys lines.\n")
	for _, id := range (approval.ApproverKeys{Passkeys: keys}).IDs() {
		out = fmt.Appendf(out, "%s %s %s\n", id, approval.KeyTypeWebAuthn, approval.EncodePasskey(keys[id]))
	}
	if len(keys) == 0 {
		out = append(out, "# Every passkey was revoked.\n"+approval.NoKeysLine+"\n"...)
	}
	tmp := filepath.Join(dir, PasskeysFile+".tmp")
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, PasskeysFile))
}

// ApproverToken reads the MEW participant token the server joins the
// space with for approver (dir/tokens/<id>).
func ApproverToken(dir, approver string) (string, error) {
	if !approverID.MatchString(approver) {
		return "", fmt.Errorf("approver id %q cannot name a token file", approver)
	}
	b, err := os.ReadFile(filepath.Join(dir, tokensDir, approver))
	if err != nil {
		return "", err
	}
	tok := string(trimSpace(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", filepath.Join(dir, tokensDir, approver))
	}
	return tok, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
)

// KeyTypeWebAuthn is the second field of an approver keys line that pins a
// passkey: `<approver id> webauthn <credential>`.
const KeyTypeWebAuthn = "webauthn"

// Passkey is an approver's WebAuthn credential as fulfiller pins it: an
// answer for that approver counts only with an assertion by this
// credential, made for this relying party at this origin, whose challenge
// is the digest of the signed approval bytes (docs/protocol.md, "Signed
// approvals").
type Passkey struct {
	RPID         string // relying party id the credential is scoped to, e.g. inbox.example.com
	Origin       string // the inbox's origin, e.g. https://inbox.example.com
	CredentialID []byte // the authenticator's credential id (rawId)
	PublicKey    []byte // COSE_Key, as the authenticator gave it at enrolment
}

// Passkeys maps an approver id to their pinned passkey.
type Passkeys map[string]Passkey

// EncodePasskey writes a passkey as the third field of a keys line:
// `<rp id>,<origin>,<credential id>,<COSE public key>`, the last two
// base64url without padding. Commas never occur in an RP id, an origin or
// base64url, so the line stays one whitespace-free field.
func EncodePasskey(p Passkey) string {
	return strings.Join([]string{p.RPID, p.Origin,
		base64.RawURLEncoding.EncodeToString(p.CredentialID),
		base64.RawURLEncoding.EncodeToString(p.PublicKey)}, ",")
}

// DecodePasskey reads a passkey as EncodePasskey writes it, and checks that
// its public key is one WebAuthn can verify with, so that a bad line fails
// at start-up and not at the first approval.
func DecodePasskey(s string) (Passkey, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return Passkey{}, errors.New("want `<rp id>,<origin>,<credential id>,<COSE public key>`")
	}
	p := Passkey{RPID: f[0], Origin: f[1]}
	if err := CheckRelyingParty(p.RPID, p.Origin); err != nil {
		return Passkey{}, err
	}
	var err error
	if p.CredentialID, err = base64.RawURLEncoding.DecodeString(f[2]); err != nil || len(p.CredentialID) == 0 {
		return Passkey{}, errors.New("credential id is not base64url without padding")
	}
	if p.PublicKey, err = base64.RawURLEncoding.DecodeString(f[3]); err != nil {
		return Passkey{}, errors.New("public key is not base64url without padding")
	}
	if _, err := webauthncose.ParsePublicKey(p.PublicKey); err != nil {
		return Passkey{}, fmt.Errorf("public key is not a COSE key: %w", err)
	}
	return p, nil
}

// CheckRelyingParty checks that rpID is a host name and origin a
// scheme://host[:port] within it, as WebAuthn requires of a credential's
// relying party.
func CheckRelyingParty(rpID, origin string) error {
	if rpID == "" || strings.ContainsAny(rpID, "/:") {
		return fmt.Errorf("rp id %q is not a domain name", rpID)
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
		return fmt.Errorf("origin %q is not scheme://host[:port]", origin)
	}
	if h := u.Hostname(); h != rpID && !strings.HasSuffix(h, "."+rpID) {
		return fmt.Errorf("origin %s is not within rp id %s", origin, rpID)
	}
	return nil
}

// PasskeyChallenge is the WebAuthn challenge an approver's passkey signs
// for an answer: SHA-256 of SigningBytes, base64url without padding as it
// appears in clientDataJSON. content is the answer's content without
// "signature" (nil for decline and cancel).
func PasskeyChallenge(requestID, digest, action string, content json.RawMessage) (string, error) {
	msg, err := SigningBytes(requestID, digest, action, content)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(msg)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// Assertion is what content.signature holds for an approver with a
// passkey: the JSON of the browser's PublicKeyCredential for a
// navigator.credentials.get() (the WebAuthn "toJSON" shape: binary fields
// base64url without padding), as a string.
type Assertion = protocol.CredentialAssertionResponse

// VerifyPasskey checks the WebAuthn assertion in an answer's content
// (content as received, signature included) against the approver's pinned
// passkey: the credential is the pinned one; clientDataJSON says
// webauthn.get, the passkey's origin, not cross-origin, and a challenge
// equal to PasskeyChallenge of what the answer says; authenticatorData
// hashes the passkey's RP id and has the user-present flag; and the
// signature over authenticatorData || SHA-256(clientDataJSON) verifies with
// the passkey's public key. Whoever relayed the answer (an inbox server)
// can therefore change nothing in it.
func VerifyPasskey(p Passkey, requestID, digest, action string, content json.RawMessage) error {
	rest, sig, err := SplitSignature(content)
	if err != nil {
		return err
	}
	if sig == "" {
		return ErrUnsigned
	}
	var car Assertion
	dec := json.NewDecoder(strings.NewReader(sig))
	if err := dec.Decode(&car); err != nil {
		return fmt.Errorf("%w: not a WebAuthn assertion: %v", ErrBadSignature, err)
	}
	parsed, err := car.Parse()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, describe(err))
	}
	if !bytes.Equal(parsed.RawID, p.CredentialID) {
		return fmt.Errorf("%w: made with another credential", ErrBadSignature)
	}
	challenge, err := PasskeyChallenge(requestID, digest, action, rest)
	if err != nil {
		return err
	}
	err = parsed.Verify(challenge, p.RPID, "", []string{p.Origin}, nil, nil, protocol.TopOriginImplicitVerificationMode,
		false, false, true, p.PublicKey, protocol.SignaturePolicy{})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, describe(err))
	}
	return nil
}

// describe gives go-webauthn's error with its details (its Error() is
// only the short type) and what was expected where that says which check
// failed; a challenge mismatch is said in words, since the two digests
// help nobody reading a log.
func describe(err error) string {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return err.Error()
	}
	msg := pe.Details
	if msg == "" {
		msg = pe.Type
	}
	if pe.DevInfo != "" && !strings.Contains(msg, "challenge") {
		msg += " (" + strings.Join(strings.Fields(pe.DevInfo), " ") + ")"
	}
	return msg
}

// ApproverKeys are the keys of --approver-keys: Ed25519 public keys and
// passkeys. An approver has at most one.
type ApproverKeys struct {
	Ed25519  Keys
	Passkeys Passkeys
	// None is true when the file says, in a line of its own, `none`: it
	// removes every key on purpose. A file with no keys and no such line
	// (empty, or comments only) is what a truncated write leaves, and a
	// running fulfiller refuses it while keys are in force
	// (approverkeys).
	None bool
}

// NoKeysLine is the line that makes an approver keys file say, on
// purpose, that no approver is keyed (ApproverKeys.None).
const NoKeysLine = "none"

// Has says whether the approver's answers must be signed.
func (k ApproverKeys) Has(id string) bool {
	_, a := k.Ed25519[id]
	_, b := k.Passkeys[id]
	return a || b
}

// IDs returns the approvers that have a key of either kind, sorted.
func (k ApproverKeys) IDs() []string {
	ids := k.Ed25519.IDs()
	for id := range k.Passkeys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// ParseApproverKeys reads an approver keys file whose lines are either
// `<approver id> <base64url Ed25519 public key>` or `<approver id>
// webauthn <credential>` (EncodePasskey); blank lines and # comments are
// skipped. An approver listed twice, of either kind, is an error. A line
// `none` (NoKeysLine) says the file keys nobody on purpose; it is an
// error beside any key.
func ParseApproverKeys(r io.Reader) (ApproverKeys, error) {
	keys := ApproverKeys{Ed25519: Keys{}, Passkeys: Passkeys{}}
	err := scanKeyLines(r, func(f []string) error {
		if len(f) == 1 && f[0] == NoKeysLine {
			if len(keys.IDs()) > 0 || keys.None {
				return fmt.Errorf("`%s` removes every key: it must be the file's only line (besides comments)", NoKeysLine)
			}
			keys.None = true
			return nil
		}
		if keys.None {
			return fmt.Errorf("a key after `%s`: `%s` removes every key and must be the file's only line (besides comments)", NoKeysLine, NoKeysLine)
		}
		if keys.Has(f[0]) {
			return fmt.Errorf("approver %s is listed twice", f[0])
		}
		switch {
		case len(f) == 2:
			pub, err := DecodePublicKey(f[1])
			if err != nil {
				return fmt.Errorf("key of %s: %w", f[0], err)
			}
			keys.Ed25519[f[0]] = pub
		case len(f) == 3 && f[1] == KeyTypeWebAuthn:
			p, err := DecodePasskey(f[2])
			if err != nil {
				return fmt.Errorf("passkey of %s: %w", f[0], err)
			}
			keys.Passkeys[f[0]] = p
		default:
			return fmt.Errorf("want `<approver id> <base64url Ed25519 public key>` or `<approver id> webauthn <credential>`, got %d fields", len(f))
		}
		return nil
	})
	if err != nil {
		return ApproverKeys{}, err
	}
	return keys, nil
}

// LoadApproverKeys reads the approver keys file at path (ParseApproverKeys).
// Errors name the file, and the line when one is wrong.
func LoadApproverKeys(path string) (ApproverKeys, error) {
	return loadKeyFile(path, ParseApproverKeys)
}

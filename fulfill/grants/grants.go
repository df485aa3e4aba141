// Package grants is the model of a grant (docs/design.md "Grants"): an approver's
// "allow calls like this for a while", pinned to the approved call's
// values of the fields the policy's offer names, until it expires or is
// revoked. It decides which calls a grant covers; keeping grants (in
// JetStream, for a group) is package grantstore's work, offering them on
// the approval form and showing them to policies as input.grants the
// elicit and fulfill packages'. It depends on no store and no policy
// engine, so that the approver's client can show what a grant would pin.
//
// A grant is standing permission given on one human's word, so every
// question here is answered narrowly: a value that cannot be compared
// exactly does not match, and a prefix never matches a path that climbs out
// of it or that a tool could read as another path (Ambiguous).
package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// Call is what a grant is matched against: a tools/call proposal, as the
// fulfiller resolved it.
type Call struct {
	// Proposer is the proposal's from: a claim unless the gateway
	// authenticates senders (docs/design.md "Proposer identity and
	// grants"); the Registry decides whether a grant may rely on it.
	Proposer  string
	Tool      string
	Server    string                     // the tool owner the call goes to
	Arguments map[string]json.RawMessage // params.arguments
}

// Pin is one field a grant holds to the approved call's value.
type Pin struct {
	// Field is "server" or "arguments.NAME" (proposer and tool are the
	// grant's own fields).
	Field string `json:"field"`
	// Value is the approved value, canonical JSON (RFC 8785); empty for a
	// prefix pin.
	Value json.RawMessage `json:"value,omitempty"`
	// Prefix is what a string argument must start with, for a :prefix pin.
	Prefix string `json:"prefix,omitempty"`
}

// Grant is one approver's standing permission.
type Grant struct {
	ID string `json:"id"`
	// Proposer is the proposer the grant is pinned to; empty when it is
	// not pinned, and then anyone who may propose in the space can use it
	// (docs/design.md "Proposer identity and grants": without
	// --gateway-authenticates-from, from is a claim anyone can make, so a
	// pin to it would only pretend to narrow the grant). Absent from the
	// JSON then, so that a policy comparing it to input.proposer.id never
	// takes an unpinned grant for a pinned one.
	Proposer  string    `json:"proposer,omitempty"`
	Tool      string    `json:"tool"`
	Server    string    `json:"server"` // where the approved call went; matched only when pinned
	Pins      []Pin     `json:"pins,omitempty"`
	GrantedBy string    `json:"granted_by"`
	Created   time.Time `json:"created"`
	Expires   time.Time `json:"expires"`
	Revoked   bool      `json:"revoked,omitempty"`
	// Evidence is the approver's signed answer that made the grant, when
	// approvals are signed: with their public key anyone can check that
	// they chose it (approval.Verify), and that it pins what their answer
	// approved.
	Evidence *Evidence `json:"evidence,omitempty"`
}

// Evidence is a signed approval as docs/protocol.md's signature covers it.
type Evidence struct {
	Request   string          `json:"request"` // the elicitation's envelope id
	Digest    string          `json:"digest"`  // the proposed call's digest
	Action    string          `json:"action"`
	Content   json.RawMessage `json:"content"` // the form content, without the signature
	Signature string          `json:"signature"`
}

// Errors of New.
var (
	ErrNotOffered = errors.New("grant not offered")
	ErrBadTTL     = errors.New("grant duration not offered")
)

// New makes the grant an approver chose when approving call (as edited):
// for ttl, which must be one of offer.Offers(), pinned to call's values
// of offer.Scope — to call's proposer only when the scope names
// "proposer". A pinned argument the approved call does not have cannot
// be pinned, and makes no grant rather than a wider one.
func New(id string, offer *decision.Grantable, call Call, ttl time.Duration, by string, now time.Time) (Grant, error) {
	if offer == nil {
		return Grant{}, ErrNotOffered
	}
	if !slices.Contains(offer.Offers(), ttl) {
		return Grant{}, fmt.Errorf("%w: %s (offered %v)", ErrBadTTL, decision.FormatGrantDuration(ttl), offer.Offers())
	}
	now = now.Truncate(time.Second) // read by people: whole seconds, and never longer than chosen
	g := Grant{ID: id, Tool: call.Tool, Server: call.Server, GrantedBy: by, Created: now, Expires: now.Add(ttl)}
	if g.Tool == "" {
		return Grant{}, errors.New("grant: the approved call has no tool")
	}
	for _, f := range offer.Scope {
		switch {
		case f.Path == "proposer":
			if call.Proposer == "" {
				return Grant{}, errors.New("grant: the approved call has no proposer to pin")
			}
			g.Proposer = call.Proposer
		case f.Path == "tool":
			continue // the grant's own field
		case f.Path == "server":
			v, _ := json.Marshal(call.Server)
			g.Pins = append(g.Pins, Pin{Field: f.Path, Value: v})
		default:
			name := strings.TrimPrefix(f.Path, "arguments.")
			raw, ok := call.Arguments[name]
			if !ok {
				return Grant{}, fmt.Errorf("grant: the approved call has no argument %q to pin", name)
			}
			pin, err := pinArgument(f, raw)
			if err != nil {
				return Grant{}, err
			}
			g.Pins = append(g.Pins, pin)
		}
	}
	return g, nil
}

// pinArgument pins one argument: its canonical value, or for a :prefix
// field the directory a string value lies in (approving
// /srv/app/config.yaml allows /srv/app/…, never /srv/apple). A value whose
// directory is the root (or that has none) is pinned exactly: approving
// /etc must not allow everything under /. Narrower, never wider.
func pinArgument(f decision.GrantField, raw json.RawMessage) (Pin, error) {
	var s string
	if f.Prefix && json.Unmarshal(raw, &s) == nil {
		if Ambiguous(s) {
			return Pin{}, fmt.Errorf("grant: %s %q has . or .. segments, backslashes, percent-escapes or control characters: no prefix can be pinned to it", f.Path, s)
		}
		if dir, ok := Dir(s); ok {
			return Pin{Field: f.Path, Prefix: dir}, nil
		}
	}
	v, err := jcs.Transform(raw)
	if err != nil {
		return Pin{}, fmt.Errorf("grant: %s: %w", f.Path, err)
	}
	return Pin{Field: f.Path, Value: v}, nil
}

// Live reports whether g is neither expired nor revoked at now. A live
// grant pinned to a proposer still matches nothing where proposers are
// not authenticated (Registry.Usable).
func (g Grant) Live(now time.Time) bool { return !g.Revoked && now.Before(g.Expires) }

// ProposerPinned reports whether g is for one proposer's calls only.
func (g Grant) ProposerPinned() bool { return g.Proposer != "" }

// Matches reports whether g covers c at now: live, the same tool, the
// same proposer when g is pinned to one, and every pinned field equal
// (or, for a prefix, under the prefix). Whether c's proposer can be
// relied on is the Registry's question (Matching), not this one's.
func (g Grant) Matches(c Call, now time.Time) bool {
	if !g.Live(now) || c.Tool != g.Tool || (g.ProposerPinned() && c.Proposer != g.Proposer) {
		return false
	}
	for _, p := range g.Pins {
		var raw json.RawMessage
		if p.Field == "server" {
			raw, _ = json.Marshal(c.Server)
		} else {
			var ok bool
			if raw, ok = c.Arguments[strings.TrimPrefix(p.Field, "arguments.")]; !ok {
				return false
			}
		}
		if !p.matches(raw) {
			return false
		}
	}
	return true
}

func (p Pin) matches(raw json.RawMessage) bool {
	if p.Prefix != "" {
		var s string
		return json.Unmarshal(raw, &s) == nil && strings.HasPrefix(s, p.Prefix) && !Ambiguous(s)
	}
	v, err := jcs.Transform(raw)
	return err == nil && bytes.Equal(v, p.Value)
}

// Dir is the directory path s lies in, with its trailing slash
// ("/srv/app/config.yaml" → "/srv/app/"), the widest prefix a value may
// be generalised to. ok is false when that directory is the root or s has
// none: approving /etc must not allow everything under /.
func Dir(s string) (dir string, ok bool) {
	if i := strings.LastIndexByte(s, '/'); i > 0 {
		return s[:i+1], true
	}
	return "", false
}

// Climbs reports whether a path has "." or ".." segments, with which a
// value under a prefix can name something outside it
// (/srv/app/../../etc/passwd). Such a value never matches a prefix.
func Climbs(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// Ambiguous reports whether a path is one that a prefix compared byte by
// byte cannot vouch for, because a tool may read it as a path outside the
// prefix: "." or ".." segments (Climbs); a backslash, a separator on
// Windows and an escape elsewhere (/srv/app/..\..\etc/passwd); a
// percent-escape, which a URL-minded tool decodes (/srv/app/%2e%2e/…);
// control characters (a newline splits a path in line-based tools and
// logs) and text that is not UTF-8. Such a value never matches a prefix,
// and no prefix is pinned to one.
func Ambiguous(s string) bool {
	if Climbs(s) || strings.ContainsRune(s, '\\') || !utf8.ValidString(s) {
		return true
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return true
		}
		if r == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Anyone is who can use a grant not pinned to a proposer, in the words
// the card, the inbox and the operator's listing use (docs/design.md
// "Proposer identity and grants").
const Anyone = "anyone who may propose in this space"

// Terms says in a few words what g allows, for a person deciding whether
// to make it or revoke it: "coder → write_file, path under /srv/app/",
// or, not pinned to a proposer, "anyone who may propose in this space →
// write_file, …". Values come from the proposer: callers showing them on
// a terminal or a page escape them as they escape any proposer text.
func (g Grant) Terms() string {
	who := g.Proposer
	if !g.ProposerPinned() {
		who = Anyone
	}
	parts := []string{who + " → " + g.Tool}
	for _, p := range g.Pins {
		name := strings.TrimPrefix(p.Field, "arguments.")
		if p.Prefix != "" {
			parts = append(parts, fmt.Sprintf("%s under %s", name, p.Prefix))
			continue
		}
		var s string
		if json.Unmarshal(p.Value, &s) == nil {
			parts = append(parts, fmt.Sprintf("%s = %s", name, s))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s = %s", name, p.Value))
	}
	return strings.Join(parts, ", ")
}

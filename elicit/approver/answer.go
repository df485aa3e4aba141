package approver

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
)

// Answer is what the person decided about one card.
type Answer struct {
	Action     string // approval.ActionAccept, ActionDecline or ActionCancel
	Approve    bool   // accept: approve the call (as edited)
	Reason     string // accept: optional; the proposer sees it when the call is refused
	Edits      []Edit // accept + approve: changed editable arguments
	DelegateTo string // accept: hand the decision to this approver instead
	// Grant, with an approval, is how long to allow calls like this one
	// (one of Card.Grant.Offers); "" for no grant.
	Grant string
	// Signature, when set, is content.signature made elsewhere (a passkey's
	// WebAuthn assertion, made in the approver's browser) and is sent
	// as is instead of signing with Options.Key: the client relaying it
	// holds no key of the approver's.
	Signature string
}

// Edit is a new value for one editable argument.
type Edit struct {
	Name  string
	Value json.RawMessage
}

// Describe says in a few words what the answer does, for the person.
func (a Answer) Describe() string {
	switch {
	case a.Action == approval.ActionCancel:
		return "dismissed"
	case a.Action == approval.ActionDecline:
		return "declined"
	case a.DelegateTo != "":
		return "handed to " + a.DelegateTo
	case !a.Approve:
		return "declined: " + a.Reason
	}
	s := "approved"
	if len(a.Edits) > 0 {
		var parts []string
		for _, e := range a.Edits {
			parts = append(parts, e.Name+"="+string(e.Value))
		}
		s += " with " + strings.Join(parts, ", ")
	}
	if a.Grant != "" {
		s += ", and calls like it for " + a.Grant
	}
	return s
}

// Approves reports whether the answer approves the call (as edited).
func (a Answer) Approves() bool {
	return a.Action == approval.ActionAccept && a.Approve && a.DelegateTo == ""
}

// Errors of Response.
var (
	ErrCannotSign      = errors.New("the request carries no call digest, so the answer cannot be signed")
	ErrDigestMismatch  = errors.New("the call digest does not match the call shown; refusing to approve it")
	ErrGrantNotOffered = errors.New("that grant was not offered on this card")
)

// Response builds the mcp/response that answers the card. With a key, the
// answer is signed as docs/protocol.md says (decline and cancel too, over {}),
// so that the fulfiller can tell it from a forgery.
func Response(c *Card, a Answer, key ed25519.PrivateKey) (agent.Envelope, error) {
	switch a.Action {
	case approval.ActionAccept, approval.ActionDecline, approval.ActionCancel:
	default:
		return agent.Envelope{}, fmt.Errorf("answer: unknown action %q", a.Action)
	}
	approving := a.Approves()
	if approving && c.Proposal != nil && !c.DigestOK {
		return agent.Envelope{}, ErrDigestMismatch
	}
	if a.Grant != "" && (!approving || c.Grant == nil || !slices.Contains(c.Grant.Offers, a.Grant)) {
		return agent.Envelope{}, fmt.Errorf("%w: %q", ErrGrantNotOffered, a.Grant)
	}
	var content []byte
	if a.Action == approval.ActionAccept {
		var err error
		if content, err = formContent(a); err != nil {
			return agent.Envelope{}, err
		}
	}
	if a.Signature != "" {
		content = withSignature(content, a.Signature)
	} else if key != nil {
		if c.Proposal == nil || c.Proposal.Digest == "" {
			return agent.Envelope{}, ErrCannotSign
		}
		sig, err := approval.Sign(key, c.RequestID, c.Proposal.Digest, a.Action, content)
		if err != nil {
			return agent.Envelope{}, fmt.Errorf("sign: %w", err)
		}
		content = withSignature(content, sig)
	}
	result := map[string]json.RawMessage{"action": mustJSON(a.Action)}
	if content != nil {
		result["content"] = content
	}
	resultJSON, err := orderedJSON([]string{"action", "content"}, result)
	if err != nil {
		return agent.Envelope{}, err
	}
	payload, err := orderedJSON([]string{"jsonrpc", "id", "result"}, map[string]json.RawMessage{
		"jsonrpc": mustJSON("2.0"), "id": c.RPCID, "result": resultJSON,
	})
	if err != nil {
		return agent.Envelope{}, err
	}
	return agent.Envelope{To: []string{c.From}, Kind: agent.KindResponse, CorrelationID: agent.CorrelationIDs{c.RequestID}, Payload: payload}, nil
}

// formContent is an accept's content: approve, reason, edits, delegate_to.
func formContent(a Answer) ([]byte, error) {
	keys := []string{approval.FieldApprove}
	vals := map[string]json.RawMessage{approval.FieldApprove: mustJSON(a.Approve && a.DelegateTo == "")}
	if a.Reason != "" {
		keys = append(keys, approval.FieldReason)
		vals[approval.FieldReason] = mustJSON(a.Reason)
	}
	for _, e := range a.Edits {
		if _, dup := vals[e.Name]; dup {
			return nil, fmt.Errorf("answer: field %q given twice", e.Name)
		}
		keys = append(keys, e.Name)
		vals[e.Name] = e.Value
	}
	if a.DelegateTo != "" {
		keys = append(keys, approval.FieldDelegateTo)
		vals[approval.FieldDelegateTo] = mustJSON(a.DelegateTo)
	}
	if a.Grant != "" {
		if _, dup := vals[approval.FieldGrant]; dup {
			return nil, fmt.Errorf("answer: field %q given twice", approval.FieldGrant)
		}
		keys = append(keys, approval.FieldGrant)
		vals[approval.FieldGrant] = mustJSON(a.Grant)
	}
	return orderedJSON(keys, vals)
}

// withSignature adds "signature" to a content object (nil: a new one).
func withSignature(content []byte, sig string) []byte {
	s := mustJSON(sig)
	if len(content) == 0 {
		return []byte(`{"signature":` + string(s) + `}`)
	}
	out := bytes.TrimSuffix(bytes.TrimSpace(content), []byte("}"))
	if !bytes.Equal(bytes.TrimSpace(out), []byte("{")) {
		out = append(out, ',')
	}
	return append(append(out, `"signature":`...), append(s, '}')...)
}

// orderedJSON writes an object with keys in the given order (missing keys
// are left out), without HTML escaping.
func orderedJSON(keys []string, vals map[string]json.RawMessage) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range keys {
		v, ok := vals[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.Write(mustJSON(k))
		b.WriteByte(':')
		if err := json.Compact(&b, v); err != nil {
			return nil, fmt.Errorf("answer: %s: %w", k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// ParseValue reads what a person typed for a field, checked against its
// type: a string as is, numbers and integers as numbers, booleans as
// y/yes/true/1 or n/no/false/0.
func ParseValue(f Field, text string) (json.RawMessage, error) {
	t := strings.TrimSpace(text)
	switch f.Type {
	case "integer":
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s must be a whole number", f.Name)
		}
		return mustJSON(n), nil
	case "number":
		n, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, fmt.Errorf("%s must be a number", f.Name)
		}
		return mustJSON(n), nil
	case "boolean":
		switch strings.ToLower(t) {
		case "y", "yes", "true", "1":
			return json.RawMessage("true"), nil
		case "n", "no", "false", "0":
			return json.RawMessage("false"), nil
		}
		return nil, fmt.Errorf("%s must be yes or no", f.Name)
	default:
		if len(f.Enum) > 0 && !slices.Contains(f.Enum, text) {
			return nil, fmt.Errorf("%s must be one of %s", f.Name, strings.Join(f.Enum, ", "))
		}
		return mustJSON(text), nil
	}
}

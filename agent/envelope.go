// Package agent is a MEW Protocol v0.4 participant: it joins a space over
// WebSocket, keeps the session alive and re-establishes it, tracks who else is
// in the space, and sends and receives envelopes for the rest of fulfiller.
//
// It speaks what the reference gateway really does (recorded in
// testdata/conformance/mew-v0.4), not only what the spec says: a join frame
// after the upgrade, broadcast of everything to everyone, no server pings.
package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Protocol versions. The gateway passes v0.3 envelopes through unchanged, so
// a tolerant participant accepts both and always writes v0.4.
const (
	ProtocolV04 = "mew/v0.4"
	ProtocolV03 = "mew/v0.3"
)

// Envelope kinds fulfiller reads or writes.
const (
	KindProposal = "mcp/proposal"
	KindRequest  = "mcp/request"
	KindResponse = "mcp/response"
	KindWithdraw = "mcp/withdraw"
	KindReject   = "mcp/reject"
	KindChat     = "chat"
	KindWelcome  = "system/welcome"
	KindPresence = "system/presence"
	KindError    = "system/error"
)

// GatewayID is the `from` of envelopes the reference gateway makes itself.
// Stream errors use "gateway" instead; see IsFromGateway.
const GatewayID = "system:gateway"

// Envelope is one MEW message. Decoding is tolerant: unknown fields are
// ignored (they stay visible in Raw), a bare-string correlation_id or to
// becomes a one-element list, and payload is kept as raw JSON so that the
// receiver decides how strictly to read it.
type Envelope struct {
	Protocol      string          `json:"protocol"`
	ID            string          `json:"id,omitempty"`
	TS            string          `json:"ts,omitempty"`
	From          string          `json:"from,omitempty"`
	To            Recipients      `json:"to,omitempty"`
	Kind          string          `json:"kind"`
	CorrelationID CorrelationIDs  `json:"correlation_id,omitempty"`
	Context       json.RawMessage `json:"context,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`

	// Raw is the frame exactly as received (nil for envelopes built
	// locally). Policies see proposals byte for byte as the proposer sent
	// them, including fields this type does not name.
	Raw json.RawMessage `json:"-"`
}

// Recipients is the envelope's to. The spec makes it an array; a bare
// string is read as a one-element list, as the gateway does for
// correlation_id, so that a sender's slip does not cost its envelope.
type Recipients []string

// UnmarshalJSON accepts an array of strings, a single string, or null.
func (r *Recipients) UnmarshalJSON(b []byte) error {
	list, err := stringOrList(b)
	if err != nil {
		return fmt.Errorf("to: %w", err)
	}
	*r = list
	return nil
}

// stringOrList reads a JSON array of strings, a single string (as a
// one-element list), or null (as nil).
func stringOrList(b []byte) ([]string, error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		return nil, nil
	case b[0] == '"':
		var s string
		if err := Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	var list []string
	if err := Unmarshal(b, &list); err != nil {
		return nil, err
	}
	return list, nil
}

// CorrelationIDs is the envelope's correlation_id. The spec makes it an
// array; senders that write a bare string are accepted too.
type CorrelationIDs []string

// UnmarshalJSON accepts an array of strings, a single string, or null.
func (c *CorrelationIDs) UnmarshalJSON(b []byte) error {
	list, err := stringOrList(b)
	if err != nil {
		return fmt.Errorf("correlation_id: %w", err)
	}
	*c = list
	return nil
}

// First returns the first correlation id, the one MEW uses to name what an
// envelope answers, or "" when there is none.
func (c CorrelationIDs) First() string {
	if len(c) == 0 {
		return ""
	}
	return c[0]
}

// ErrNotEnvelope is returned by Decode for JSON that is not a MEW envelope.
var ErrNotEnvelope = errors.New("not a MEW envelope")

// Decode parses one text frame. It fails for frames that are not a JSON
// object (or nest deeper than encoding/json's 10 000 levels), have an
// unknown protocol or no kind, or give a field the spec names a value of
// another type (a number id, an object to): such a frame is malformed and
// its receiver logs and skips it. Unknown fields and a bare-string to or
// correlation_id are accepted. Keys are matched exactly, as the gateway
// matches them (see Unmarshal).
func Decode(frame []byte) (Envelope, error) {
	var env Envelope
	if err := Unmarshal(frame, &env); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrNotEnvelope, err)
	}
	switch env.Protocol {
	case ProtocolV04, ProtocolV03:
	case "":
		return Envelope{}, fmt.Errorf("%w: no protocol", ErrNotEnvelope)
	default:
		return Envelope{}, fmt.Errorf("%w: unsupported protocol %q", ErrNotEnvelope, env.Protocol)
	}
	if env.Kind == "" {
		return Envelope{}, fmt.Errorf("%w: no kind", ErrNotEnvelope)
	}
	env.Raw = frame
	return env, nil
}

// Encode marshals an envelope for the wire. It does not fill in missing
// fields; Stamp does that.
func Encode(env Envelope) ([]byte, error) {
	return json.Marshal(env)
}

// Stamp fills the fields every envelope fulfiller sends must carry:
// protocol, a unique id, ts and from. Fields already set are kept, so a
// caller that needs to know an id in advance may choose it.
func Stamp(env *Envelope, from string, now time.Time) {
	if env.Protocol == "" {
		env.Protocol = ProtocolV04
	}
	if env.ID == "" {
		env.ID = NewID(from)
	}
	if env.TS == "" {
		env.TS = now.UTC().Format(time.RFC3339Nano)
	}
	if env.From == "" {
		env.From = from
	}
}

// NewID returns a fresh envelope id. The gateway's own ids are built from
// milliseconds and collide (two welcomes shared one id in the recordings);
// answers are matched by id, so ours come from crypto/rand.
func NewID(prefix string) string {
	if prefix == "" {
		return rand.Text()
	}
	return prefix + "-" + rand.Text()
}

// AddressedTo reports whether the envelope is for id: `to` absent or empty
// means everyone.
func (e *Envelope) AddressedTo(id string) bool {
	if len(e.To) == 0 {
		return true
	}
	for _, t := range e.To {
		if t == id {
			return true
		}
	}
	return false
}

// IsFromGateway reports whether the envelope claims to come from the gateway.
// The claim is not authenticated (any participant holding system/* can
// forge it); callers that act on it should know that.
func (e *Envelope) IsFromGateway() bool {
	return e.From == GatewayID || e.From == "gateway"
}

// MustPayload marshals v for use as an envelope payload. It panics only for
// values encoding/json cannot marshal, which is a programming error.
func MustPayload(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agent: payload does not marshal: %v", err))
	}
	return b
}

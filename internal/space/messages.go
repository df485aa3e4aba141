package space

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// The frames the space makes itself. Field order is the key order the
// reference gateway puts on the wire, which clients (and tests) may compare
// byte for byte.

const gatewayID = "system:gateway"

// baseline is what the reference gateway appends to every capability list.
var baseline = agent.Capability{ID: "mcp-response", Kind: agent.KindResponse}

// capSet is one resolved capability list: what Permits checks and, encoded
// once, what welcome, presence and error frames show.
type capSet struct {
	caps []agent.Capability
	json json.RawMessage
}

// newCapSet dedupes caps by whole object and appends the baseline, as the
// reference gateway does at join.
func newCapSet(caps []agent.Capability) (*capSet, error) {
	seen := make(map[string]bool, len(caps)+1)
	out := make([]agent.Capability, 0, len(caps)+1)
	for _, c := range append(append([]agent.Capability(nil), caps...), baseline) {
		key, err := marshal(c)
		if err != nil {
			return nil, err
		}
		if seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		out = append(out, c)
	}
	b, err := marshal(out)
	if err != nil {
		return nil, err
	}
	return &capSet{caps: out, json: b}, nil
}

type participantInfo struct {
	ID           string          `json:"id"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
}

type welcomeFrame struct {
	Protocol string         `json:"protocol"`
	ID       string         `json:"id"`
	TS       string         `json:"ts"`
	From     string         `json:"from"`
	To       []string       `json:"to"`
	Kind     string         `json:"kind"`
	Payload  welcomePayload `json:"payload"`
}

type welcomePayload struct {
	You           participantInfo   `json:"you"`
	Participants  []participantInfo `json:"participants"`
	ActiveStreams []struct{}        `json:"active_streams"`
}

func welcomeMsg(now time.Time, you participantInfo, others []participantInfo) []byte {
	if others == nil {
		others = []participantInfo{}
	}
	return mustMarshal(welcomeFrame{
		Protocol: agent.ProtocolV04,
		ID:       "welcome-" + strconv.FormatInt(now.UnixMilli(), 10),
		TS:       timestamp(now),
		From:     gatewayID,
		To:       []string{you.ID},
		Kind:     agent.KindWelcome,
		Payload:  welcomePayload{You: you, Participants: others, ActiveStreams: []struct{}{}},
	})
}

type presenceFrame struct {
	Protocol string          `json:"protocol"`
	ID       string          `json:"id"`
	TS       string          `json:"ts"`
	From     string          `json:"from"`
	Kind     string          `json:"kind"`
	Payload  presencePayload `json:"payload"`
}

type presencePayload struct {
	Event       string          `json:"event"`
	Participant participantInfo `json:"participant"`
}

// presenceMsg announces a join (with capabilities) or a leave (id only).
func presenceMsg(now time.Time, event string, who participantInfo) []byte {
	return mustMarshal(presenceFrame{
		Protocol: agent.ProtocolV04,
		ID:       "presence-" + strconv.FormatInt(now.UnixMilli(), 10),
		TS:       timestamp(now),
		From:     gatewayID,
		Kind:     agent.KindPresence,
		Payload:  presencePayload{Event: event, Participant: who},
	})
}

type errorFrame struct {
	Protocol      string            `json:"protocol"`
	ID            string            `json:"id"`
	TS            string            `json:"ts"`
	From          string            `json:"from"`
	To            []*string         `json:"to"`
	Kind          string            `json:"kind"`
	CorrelationID []json.RawMessage `json:"correlation_id,omitempty"`
	Payload       any               `json:"payload"`
}

type violationPayload struct {
	Error            string          `json:"error"`
	AttemptedKind    json.RawMessage `json:"attempted_kind,omitempty"`
	YourCapabilities json.RawMessage `json:"your_capabilities"`
}

type requestErrorPayload struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// errorMsg is a system/error addressed to one participant. to is nil before
// the join, which the reference writes as "to":[null]; offendingID is the
// raw id of the refused envelope, left out when it had none.
func errorMsg(now time.Time, to *string, offendingID []byte, payload any) []byte {
	f := errorFrame{
		Protocol: agent.ProtocolV04,
		ID:       "error-" + strconv.FormatInt(now.UnixMilli(), 10),
		TS:       timestamp(now),
		From:     gatewayID,
		To:       []*string{to},
		Kind:     agent.KindError,
		Payload:  payload,
	}
	if truthy(offendingID) {
		f.CorrelationID = []json.RawMessage{offendingID}
	}
	return mustMarshal(f)
}

func violationMsg(now time.Time, to *string, offendingID, kind []byte, caps json.RawMessage) []byte {
	if caps == nil {
		caps = json.RawMessage("[]")
	}
	return errorMsg(now, to, offendingID, violationPayload{
		Error:            "capability_violation",
		AttemptedKind:    kind,
		YourCapabilities: caps,
	})
}

const registerRefusal = "system/register is reserved for the gateway. Use capability/grant instead."

func registerRefusedMsg(now time.Time, to *string, offendingID []byte) []byte {
	return errorMsg(now, to, offendingID, requestErrorPayload{Error: "invalid_request", Message: registerRefusal})
}

type bareErrorFrame struct {
	Protocol string           `json:"protocol"`
	Kind     string           `json:"kind"`
	Payload  bareErrorPayload `json:"payload"`
}

type bareErrorPayload struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Codes of the reference gateway's id-less error frames.
const (
	codeValidation = "VALIDATION_ERROR"
	codeProcessing = "PROCESSING_ERROR"
)

// bareErrorMsg is the reference gateway's validation and parse error: no
// id, ts, from, to or correlation_id.
func bareErrorMsg(text, code string) []byte {
	return mustMarshal(bareErrorFrame{
		Protocol: agent.ProtocolV04,
		Kind:     agent.KindError,
		Payload:  bareErrorPayload{Error: text, Code: code},
	})
}

package agent

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
)

// Participant is one member of the space as the gateway announces it.
// Policies and routing need the capabilities of others (who may answer a
// tools/call, who may propose), so the roster keeps them next to the id.
type Participant struct {
	ID           string       `json:"id"`
	Capabilities []Capability `json:"capabilities,omitempty"`
}

// JoinFrame is the first frame on every socket. The reference gateway takes
// the participant id from it (camelCase participantId) and the capabilities
// from the token; nothing in the HTTP upgrade counts. It is exported so that
// the in-process test space reads exactly what the client writes.
type JoinFrame struct {
	Type          string `json:"type"`
	ParticipantID string `json:"participantId"`
	Space         string `json:"space,omitempty"`
	Token         string `json:"token"`
}

// WelcomePayload is the payload of system/welcome. Participants is nil when
// the field is absent (so a later welcome without it keeps the roster) and
// empty, not nil, when the gateway sent [].
type WelcomePayload struct {
	You           Participant     `json:"you"`
	Participants  []Participant   `json:"participants,omitzero"`
	ActiveStreams json.RawMessage `json:"active_streams,omitempty"`
}

// Presence events.
const (
	PresenceJoin  = "join"
	PresenceLeave = "leave"
)

// PresencePayload is the payload of system/presence. A leave names the
// participant by id only: the gateway sends no capabilities with it.
type PresencePayload struct {
	Event       string      `json:"event"`
	Participant Participant `json:"participant"`
}

// ErrorPayload covers the three system/error shapes the reference gateway
// sends: capability violations, validation/parse errors (Code set) and
// stream errors (StreamID set). YourCapabilities is nil when the field was
// absent and empty, not nil, when the gateway sent [] — the difference
// matters, see SessionGone.
type ErrorPayload struct {
	Error            string       `json:"error"`
	Code             string       `json:"code,omitempty"`
	Message          string       `json:"message,omitempty"`
	AttemptedKind    string       `json:"attempted_kind,omitempty"`
	YourCapabilities []Capability `json:"your_capabilities,omitzero"`
	StreamID         string       `json:"stream_id,omitempty"`
}

// ErrorCapabilityViolation is ErrorPayload.Error when the gateway refused an
// envelope the sender had no capability for.
const ErrorCapabilityViolation = "capability_violation"

// SessionGone reports whether the error means the gateway no longer holds a
// session for this socket: a capability violation that lists no
// capabilities at all. The gateway answers that way when another socket
// took the participant id over or when the session was removed underneath
// an open socket, and nothing else will tell the client.
func (p ErrorPayload) SessionGone() bool {
	return p.Error == ErrorCapabilityViolation && p.YourCapabilities != nil && len(p.YourCapabilities) == 0
}

// spaceState is what the client knows about the space: its own
// capabilities and the other participants. It is driven by envelopes only,
// so recorded traffic can be replayed through it without a socket. It is not
// safe for concurrent use; the Client guards it.
type spaceState struct {
	self   string
	caps   []Capability
	others map[string]Participant
}

// effect tells the caller what an envelope did to the state.
type effect struct {
	welcome bool   // own capabilities (and maybe the roster) were replaced
	lost    string // non-empty: the session is gone, with the reason
}

func newSpaceState(self string) *spaceState {
	return &spaceState{self: self, others: map[string]Participant{}}
}

// acceptWelcome reports whether env is a welcome for us and returns its
// payload. Welcomes must claim to come from the gateway and name us in `to`.
// That claim is not authenticated (a system/* holder can forge it); the
// gateway enforces capabilities itself, so a forged welcome can at worst
// make local Can checks wrong.
func (s *spaceState) acceptWelcome(env *Envelope) (WelcomePayload, bool) {
	var w WelcomePayload
	if env.Kind != KindWelcome || !env.IsFromGateway() || !slices.Contains(env.To, s.self) {
		return w, false
	}
	if err := Unmarshal(env.Payload, &w); err != nil {
		return w, false
	}
	if w.You.ID != "" && w.You.ID != s.self {
		return w, false
	}
	return w, true
}

// reset replaces everything with what a fresh session's welcome says. A
// welcome without participants means nobody else is there.
func (s *spaceState) reset(w WelcomePayload) {
	s.caps = cloneCaps(w.You.Capabilities)
	s.others = map[string]Participant{}
	s.setOthers(w.Participants)
}

func (s *spaceState) setOthers(list []Participant) {
	clear(s.others)
	for _, p := range list {
		// The gateway lists a re-joined socket's first id as someone else;
		// we never list ourselves.
		if p.ID == "" || p.ID == s.self {
			continue
		}
		s.others[p.ID] = cloneParticipant(p)
	}
}

// observe applies one received envelope (own echoes already removed).
func (s *spaceState) observe(env *Envelope) effect {
	switch env.Kind {
	case KindWelcome:
		w, ok := s.acceptWelcome(env)
		if !ok {
			return effect{}
		}
		// A later welcome (after capability/grant) carries the full new
		// capability list, and the roster only when it has participants.
		s.caps = cloneCaps(w.You.Capabilities)
		if w.Participants != nil {
			s.setOthers(w.Participants)
		}
		return effect{welcome: true}
	case KindPresence:
		if !env.IsFromGateway() {
			return effect{}
		}
		var p PresencePayload
		if Unmarshal(env.Payload, &p) != nil || p.Participant.ID == "" {
			return effect{}
		}
		// Presence about our own id is not about this session: the gateway
		// never tells a joiner about itself, and a leave for our id is the
		// late close of an older socket of ours.
		if p.Participant.ID == s.self {
			return effect{}
		}
		switch p.Event {
		case PresenceJoin:
			s.others[p.Participant.ID] = cloneParticipant(p.Participant)
		case PresenceLeave:
			delete(s.others, p.Participant.ID)
		}
	case KindError:
		if !env.IsFromGateway() || !env.AddressedTo(s.self) {
			return effect{}
		}
		var p ErrorPayload
		if Unmarshal(env.Payload, &p) == nil && p.SessionGone() {
			return effect{lost: "gateway reports no capabilities for this session (" + p.AttemptedKind + " refused)"}
		}
	}
	return effect{}
}

// roster returns the others sorted by id, as copies.
func (s *spaceState) roster() []Participant {
	out := make([]Participant, 0, len(s.others))
	for _, p := range s.others {
		out = append(out, cloneParticipant(p))
	}
	slices.SortFunc(out, func(a, b Participant) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (s *spaceState) participant(id string) (Participant, bool) {
	p, ok := s.others[id]
	if !ok {
		return Participant{}, false
	}
	return cloneParticipant(p), true
}

func cloneParticipant(p Participant) Participant {
	p.Capabilities = cloneCaps(p.Capabilities)
	return p
}

// cloneCaps deep-copies capabilities, payload patterns included, so callers
// can never change what the client checks against.
func cloneCaps(caps []Capability) []Capability {
	if caps == nil {
		return nil
	}
	out := make([]Capability, len(caps))
	for i, c := range caps {
		c.Payload = cloneJSON(c.Payload)
		out[i] = c
	}
	return out
}

func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = cloneJSON(e)
		}
		return l
	}
	return v
}

// rosterIDs summarizes a roster for logs without dumping capabilities.
func rosterIDs(ps []Participant) slog.Value {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return slog.AnyValue(ids)
}

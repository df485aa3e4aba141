package agent

import (
	"fmt"
	"strings"
	"sync"
)

// Refusal is the gateway's refusal of an envelope we sent: a system/error
// addressed to us whose correlation_id names that envelope. The gateway
// answers nothing when it accepts an envelope (it broadcasts it, to the
// sender too), so a refusal is the only sign that an envelope whose write
// succeeded never reached anyone.
type Refusal struct {
	EnvelopeID string       // the id of our envelope
	ErrorID    string       // the id of the system/error
	Error      ErrorPayload // why, e.g. capability_violation
}

// String says what was refused and why, for logs and event messages.
func (r Refusal) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gateway refused envelope %s", r.EnvelopeID)
	if r.Error.AttemptedKind != "" {
		fmt.Fprintf(&b, " (%s)", r.Error.AttemptedKind)
	}
	fmt.Fprintf(&b, ": %s", r.Error.Error)
	if r.Error.Message != "" {
		fmt.Fprintf(&b, ": %s", r.Error.Message)
	}
	if r.Error.YourCapabilities != nil {
		fmt.Fprintf(&b, "; our capabilities: %s", strings.Join(capKinds(r.Error.YourCapabilities), ", "))
	}
	return b.String()
}

// RefusalOf reports whether env is the gateway refusing an envelope sent
// by self (the first shape of system/error in testdata/conformance/mew-v0.4/README.md:
// from system:gateway, to self, correlation_id naming the envelope).
// Errors without a correlation_id refuse nothing identifiable.
//
// The Client delivers such errors to subscribers only while they are
// plausible: one that names an envelope the gateway already accepted (we
// saw its echo) was forged by another participant and is dropped.
func RefusalOf(env Envelope, self string) (Refusal, bool) {
	if env.Kind != KindError || !env.IsFromGateway() || !env.AddressedTo(self) || len(env.To) == 0 {
		return Refusal{}, false
	}
	id := env.CorrelationID.First()
	if id == "" {
		return Refusal{}, false
	}
	var p ErrorPayload
	if err := Unmarshal(env.Payload, &p); err != nil || p.Error == "" {
		return Refusal{}, false
	}
	return Refusal{EnvelopeID: id, ErrorID: env.ID, Error: p}, true
}

// capKinds lists capabilities as strings (Capability.String), for logs.
func capKinds(caps []Capability) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = c.String()
	}
	return out
}

// sentLogSize is how many recently written envelope ids the Client
// remembers. A refusal comes within one round trip of the write, so a few
// thousand cover any realistic burst.
const sentLogSize = 4096

// What the Client knows about an envelope id.
const (
	sentUnknown = iota // not written by us, or long ago
	sentWritten        // written, no echo yet
	sentEchoed         // the gateway broadcast it back: accepted
)

// sentLog remembers the last ids the Client wrote and whether their echo
// came back, in a fixed-size ring.
type sentLog struct {
	mu   sync.Mutex
	ids  map[string]bool // id → echoed
	ring []string
	next int
}

func newSentLog(n int) sentLog {
	return sentLog{ids: make(map[string]bool, n), ring: make([]string, n)}
}

func (l *sentLog) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.ids[id]; ok {
		l.ids[id] = false // written again (a resend): its echo comes again
		return
	}
	if old := l.ring[l.next]; old != "" {
		delete(l.ids, old)
	}
	l.ring[l.next] = id
	l.next = (l.next + 1) % len(l.ring)
	l.ids[id] = false
}

// echoed records the echo of id and reports whether it was expected: id
// was written and its echo had not come yet.
func (l *sentLog) echoed(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if echoed, ok := l.ids[id]; ok && !echoed {
		l.ids[id] = true
		return true
	}
	return false
}

func (l *sentLog) state(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	echoed, ok := l.ids[id]
	switch {
	case !ok:
		return sentUnknown
	case echoed:
		return sentEchoed
	}
	return sentWritten
}

package agent

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustDecode(t testing.TB, frame string) Envelope {
	t.Helper()
	env, err := Decode([]byte(frame))
	if err != nil {
		t.Fatalf("%s: %v", frame, err)
	}
	return env
}

func TestStateIgnoresWhatIsNotAboutOthers(t *testing.T) {
	st := newSpaceState("fulfiller")
	for _, f := range []string{
		// A welcome that lists us (the gateway does so for a re-joined socket).
		`{"protocol":"mew/v0.4","id":"w","from":"system:gateway","to":["fulfiller"],"kind":"system/welcome","payload":{"you":{"id":"fulfiller","capabilities":[{"kind":"chat"}]},"participants":[{"id":"fulfiller"},{"id":"a"}]}}`,
		// Presence about our own id, presence not from the gateway, presence without an id.
		`{"protocol":"mew/v0.4","id":"p1","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{"id":"fulfiller"}}}`,
		`{"protocol":"mew/v0.4","id":"p2","from":"mallory","kind":"system/presence","payload":{"event":"join","participant":{"id":"b"}}}`,
		`{"protocol":"mew/v0.4","id":"p3","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{}}}`,
		`{"protocol":"mew/v0.4","id":"p4","from":"system:gateway","kind":"system/presence","payload":"join"}`,
		`{"protocol":"mew/v0.4","id":"p5","from":"system:gateway","kind":"system/presence","payload":{"event":"leave","participant":{"id":"fulfiller"}}}`,
		// Unknown events are ignored.
		`{"protocol":"mew/v0.4","id":"p6","from":"system:gateway","kind":"system/presence","payload":{"event":"wave","participant":{"id":"a"}}}`,
	} {
		env := mustDecode(t, f)
		if e := st.observe(&env); e.lost != "" {
			t.Fatalf("%s: lost %q", env.ID, e.lost)
		}
	}
	equal(t, "roster", ids(st.roster()), []string{"a"})
	equal(t, "caps", st.caps, []Capability{{Kind: "chat"}})
}

func TestStateSessionGoneNeedsEmptyCapabilityList(t *testing.T) {
	for _, tc := range []struct {
		payload string
		to      string
		lost    bool
	}{
		{`{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}`, `["fulfiller"]`, true},
		{`{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}`, `[]`, true},
		{`{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}`, `["other"]`, false},
		{`{"error":"capability_violation","attempted_kind":"chat"}`, `["fulfiller"]`, false},
		{`{"error":"capability_violation","your_capabilities":null}`, `["fulfiller"]`, false},
		{`{"error":"capability_violation","your_capabilities":[{"kind":"chat"}]}`, `["fulfiller"]`, false},
		{`{"error":"invalid_request","your_capabilities":[]}`, `["fulfiller"]`, false},
	} {
		env := mustDecode(t, `{"protocol":"mew/v0.4","id":"e","from":"system:gateway","to":`+tc.to+`,"kind":"system/error","payload":`+tc.payload+`}`)
		if got := newSpaceState("fulfiller").observe(&env).lost != ""; got != tc.lost {
			t.Errorf("to %s payload %s: lost=%v, want %v", tc.to, tc.payload, got, tc.lost)
		}
	}
}

func TestPayloadTypesEncodeLikeTheGateway(t *testing.T) {
	gone, _ := json.Marshal(ErrorPayload{Error: ErrorCapabilityViolation, AttemptedKind: "chat", YourCapabilities: []Capability{}})
	equal(t, "session gone", string(gone), `{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}`)
	other, _ := json.Marshal(ErrorPayload{Error: "invalid_request", Message: "m"})
	equal(t, "no capability list", string(other), `{"error":"invalid_request","message":"m"}`)
	w, _ := json.Marshal(WelcomePayload{You: Participant{ID: "a", Capabilities: []Capability{baseline}}, Participants: []Participant{}, ActiveStreams: json.RawMessage(`[]`)})
	equal(t, "welcome", string(w), `{"you":{"id":"a","capabilities":[{"id":"mcp-response","kind":"mcp/response"}]},"participants":[],"active_streams":[]}`)
	j, _ := json.Marshal(JoinFrame{Type: "join", ParticipantID: "fulfiller", Token: "t"})
	equal(t, "join", string(j), `{"type":"join","participantId":"fulfiller","token":"t"}`)
}

// proposalFrame is a realistic ~1 KB mcp/proposal as the gateway delivers it.
func proposalFrame() []byte {
	content := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 14)
	return []byte(`{"protocol":"mew/v0.4","id":"proposal-write-42","ts":"2026-11-22T10:11:33.007Z","from":"coder","to":["fs"],"kind":"mcp/proposal","correlation_id":["task-7"],"context":"repo/fix-build","payload":{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/work/repo/internal/build/config.go","content":"` + content + `","mode":"0644","create_dirs":true}}}}`)
}

func BenchmarkDecode(b *testing.B) {
	frame := proposalFrame()
	if n := len(frame); n < 900 || n > 1200 {
		b.Fatalf("frame is %d bytes, want about 1 KB", n)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	env := mustDecode(b, string(proposalFrame()))
	env.Raw = nil
	env.TS = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	out, err := Encode(env)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(env); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeToleratesSlipsNotWrongTypes: a bare-string to or correlation_id
// is read as a one-element list, so a proposal addressed that way is still
// ours to answer; a field of another type than the spec gives it makes the
// frame malformed (the receiver logs and skips it), as Decode documents.
func TestDecodeToleratesSlipsNotWrongTypes(t *testing.T) {
	env, err := Decode([]byte(`{"protocol":"mew/v0.4","id":"p1","from":"coder","to":"fulfiller","kind":"mcp/proposal","correlation_id":"t-1","payload":{"method":"tools/list"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(env.To, Recipients{"fulfiller"}) || !env.AddressedTo("fulfiller") || env.AddressedTo("other") {
		t.Errorf("to = %q", env.To)
	}
	if !slices.Equal(env.CorrelationID, CorrelationIDs{"t-1"}) {
		t.Errorf("correlation_id = %q", env.CorrelationID)
	}
	for _, frame := range []string{
		`{"protocol":"mew/v0.4","id":5,"from":"coder","kind":"mcp/proposal"}`,
		`{"protocol":"mew/v0.4","id":"p","from":"coder","to":{"id":"fs"},"kind":"mcp/proposal"}`,
		`{"protocol":"mew/v0.4","id":"p","from":"coder","to":[1],"kind":"mcp/proposal"}`,
		`{"protocol":"mew/v0.4","id":"p","from":"coder","kind":"chat","correlation_id":[1]}`,
	} {
		if _, err := Decode([]byte(frame)); !errors.Is(err, ErrNotEnvelope) {
			t.Errorf("Decode(%s) = %v, want ErrNotEnvelope", frame, err)
		}
	}
}

package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Seeds beyond the committed corpus (testdata/fuzz, generated from the
// conformance recordings): the odd shapes the decoder is meant to tolerate
// or refuse.
var envelopeSeeds = []string{
	`{"protocol":"mew/v0.4","id":"p-1","from":"coder","kind":"mcp/proposal","correlation_id":"x","payload":{"method":"tools/call","params":{"name":"add","arguments":{"a":1}}}}`,
	`{"protocol":"mew/v0.3","id":"p-2","from":"coder","to":[],"kind":"mcp/proposal","correlation_id":["a","b"],"payload":null}`,
	`{"protocol":"mew/v0.4","kind":"chat","correlation_id":null,"x_custom":{"deep":[1,2,3]}}`,
	`{"protocol":"mew/v0.4","kind":"chat","correlation_id":[1]}`,
	`{"protocol":"mew/v0.5","kind":"chat"}`,
	`{"protocol":"mew/v0.4","kind":""}`,
	`{"PROTOCOL":"mew/v0.4","Kind":"chat","ID":"case"}`,
	`{"protocol":"mew/v0.4","kind":"chat","kind":"mcp/proposal","id":"dup-key"}`,
	`{"protocol":"mew/v0.4","kind":"chat","payload":{"text":"\xff\xfe invalid utf-8"}}`,
	`{"protocol":"mew/v0.4","from":"system:gateway","to":["fulfiller"],"kind":"system/welcome","payload":{"you":{"id":"fulfiller","capabilities":[{"kind":"mcp/*"}]},"participants":[{"id":"fulfiller"},{"id":""},{"id":"fs","capabilities":[{"kind":"mcp/response","payload":{"method":"!x"}}]}]}}`,
	`{"protocol":"mew/v0.4","from":"system:gateway","kind":"system/presence","payload":{"event":"join","participant":{"id":"fulfiller"}}}`,
	`{"protocol":"mew/v0.4","from":"system:gateway","to":["fulfiller"],"kind":"system/error","payload":{"error":"capability_violation","attempted_kind":"chat","your_capabilities":[]}}`,
	`#stream-1#hello stream`,
	`[]`, `null`, `"x"`, ``,
}

// FuzzDecode checks the receive path: Decode never panics; what it accepts
// has a supported protocol and a kind, keeps the frame as Raw, re-encodes
// and decodes to the same envelope; and feeding it to the space state
// never panics nor puts ourselves or an empty id in the roster.
func FuzzDecode(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		env, err := Decode(frame)
		if err != nil {
			if !strings.Contains(err.Error(), ErrNotEnvelope.Error()) {
				t.Fatalf("Decode error does not wrap ErrNotEnvelope: %v", err)
			}
			return
		}
		if env.Protocol != ProtocolV04 && env.Protocol != ProtocolV03 {
			t.Fatalf("accepted protocol %q", env.Protocol)
		}
		if env.Kind == "" {
			t.Fatal("accepted an envelope without kind")
		}
		if !bytes.Equal(env.Raw, frame) {
			t.Fatal("Raw is not the frame as received")
		}

		out, err := Encode(env)
		if err != nil {
			t.Fatalf("decoded envelope does not re-encode: %v", err)
		}
		back, err := Decode(out)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v\n%s", err, out)
		}
		sameEnvelope(t, env, back)

		// A bare string correlation_id and its one-element array are one
		// and the same.
		if len(env.CorrelationID) == 1 {
			var asString, asArray CorrelationIDs
			s, _ := json.Marshal(env.CorrelationID[0])
			if err := json.Unmarshal(s, &asString); err != nil {
				t.Fatalf("bare string correlation_id %s refused: %v", s, err)
			}
			a, _ := json.Marshal([]string{env.CorrelationID[0]})
			if err := json.Unmarshal(a, &asArray); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(asString, asArray) || asString.First() != env.CorrelationID.First() {
				t.Fatalf("correlation_id %s decodes to %q, %s to %q", s, asString, a, asArray)
			}
		}

		// Likewise for to.
		if len(env.To) == 1 {
			var asString, asArray Recipients
			s, _ := json.Marshal(env.To[0])
			a, _ := json.Marshal([]string{env.To[0]})
			if json.Unmarshal(s, &asString) != nil || json.Unmarshal(a, &asArray) != nil || !slices.Equal(asString, asArray) {
				t.Fatalf("to %s decodes to %q, %s to %q", s, asString, a, asArray)
			}
		}

		// The receive path after Decode: the roster never holds us or an
		// empty id, and only a gateway error addressed to us loses the
		// session.
		st := newSpaceState("fulfiller")
		st.others["fs"] = Participant{ID: "fs"}
		eff := st.observe(&env)
		for _, p := range st.roster() {
			if p.ID == "" || p.ID == "fulfiller" {
				t.Fatalf("roster holds %q after %s", p.ID, env.Kind)
			}
		}
		if eff.lost != "" && (env.Kind != KindError || !env.IsFromGateway() || !env.AddressedTo("fulfiller")) {
			t.Fatalf("session lost on %s from %q to %v", env.Kind, env.From, env.To)
		}
		if eff.welcome && env.Kind != KindWelcome {
			t.Fatalf("welcome effect on %s", env.Kind)
		}
		// A `*` capability permits whatever was received.
		if !Permits([]Capability{{Kind: "*"}}, env.Kind, env.Payload) {
			t.Fatalf("kind * does not permit %q", env.Kind)
		}
	})
}

// sameEnvelope compares what an envelope means, not its bytes: to:[] and
// an absent to are the same audience, and payloads are compared as JSON.
func sameEnvelope(t *testing.T, a, b Envelope) {
	t.Helper()
	if a.Protocol != b.Protocol || a.ID != b.ID || a.TS != b.TS || a.From != b.From || a.Kind != b.Kind {
		t.Fatalf("header changed in round trip:\n%+v\n%+v", a, b)
	}
	if !slices.Equal(a.To, b.To) {
		t.Fatalf("to changed in round trip: %q -> %q", a.To, b.To)
	}
	if !slices.Equal(a.CorrelationID, b.CorrelationID) {
		t.Fatalf("correlation_id changed in round trip: %q -> %q", a.CorrelationID, b.CorrelationID)
	}
	for _, f := range []struct {
		name string
		x, y json.RawMessage
	}{{"payload", a.Payload, b.Payload}, {"context", a.Context, b.Context}} {
		if !sameJSON(f.x, f.y) {
			t.Fatalf("%s changed in round trip: %s -> %s", f.name, f.x, f.y)
		}
	}
}

func sameJSON(x, y json.RawMessage) bool {
	if len(x) == 0 || len(y) == 0 {
		return len(x) == len(y)
	}
	var vx, vy any
	dx := json.NewDecoder(bytes.NewReader(x))
	dx.UseNumber()
	dy := json.NewDecoder(bytes.NewReader(y))
	dy.UseNumber()
	if dx.Decode(&vx) != nil || dy.Decode(&vy) != nil {
		return false
	}
	return reflect.DeepEqual(vx, vy)
}

// FuzzPermits checks the capability matcher the agent uses to vet its own
// sends (and that mirrors the gateway's): it never panics, is
// deterministic, agrees with Capability.Allows, `*` permits every kind, a
// literal kind pattern permits exactly that kind, and a negated payload
// pattern never permits what the positive one requires.
func FuzzPermits(f *testing.F) {
	add := func(kindPat, payloadPat, kind, payload string) {
		f.Add(kindPat, []byte(payloadPat), kind, []byte(payload))
	}
	add("mcp/*", ``, "mcp/request", `{"method":"tools/call"}`)
	add("mcp/request", `{"method":"tools/list"}`, "mcp/request", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	add("mcp/request", `{"method":"tools/list"}`, "mcp/request", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	add("mcp/request", `{"method":"tools/*","params":{"name":"!delete_*"}}`, "mcp/request", `{"method":"tools/call","params":{"name":"delete_all"}}`)
	add("*", `{"method":["tools/list","tools/call"]}`, "mcp/proposal", `{"method":"tools/call"}`)
	add("mcp/request", `{"**":"secret*"}`, "mcp/request", `{"a":{"b":["secret-x"]}}`)
	add("/^mcp\\/(request|response)$/", `{"id":1,"ok":true}`, "mcp/response", `{"id":1,"ok":true}`)
	add("!chat", `{}`, "chat", `{"text":"hi"}`)
	add("m?p/*", `{"par*":{"x":null}}`, "mcp/x", `{"params":{"x":null}}`)
	add("*a*a*a*a*a*a*a*a*b", ``, strings.Repeat("a", 64), `not json`)
	add("/(/", `"/(/"`, "/(/", `"/(/"`)
	f.Fuzz(func(t *testing.T, kindPat string, payloadPat []byte, kind string, payload []byte) {
		var pat any
		if json.Unmarshal(payloadPat, &pat) != nil {
			pat = nil
		}
		caps := []Capability{{Kind: kindPat, Payload: pat}}
		got := Permits(caps, kind, payload)
		if again := Permits(caps, kind, payload); again != got {
			t.Fatal("Permits is not deterministic")
		}
		var decoded any
		if json.Unmarshal(payload, &decoded) != nil {
			decoded = nil
		}
		if allows := caps[0].Allows(kind, decoded); allows != got {
			t.Fatalf("Permits = %v but Allows = %v", got, allows)
		}
		if got && !Permits(append(caps, Capability{Kind: "nothing-matches-\x00"}), kind, payload) {
			t.Fatal("adding a capability took a permission away")
		}

		if !Permits([]Capability{{Kind: "*"}}, kind, payload) {
			t.Fatalf("* does not permit kind %q", kind)
		}
		if !Permits([]Capability{{Kind: kind}}, kind, payload) {
			t.Fatalf("kind %q does not permit itself", kind)
		}
		if literal(kindPat) && Permits([]Capability{{Kind: kindPat}}, kind, payload) != (kindPat == kind) {
			t.Fatalf("literal kind pattern %q vs kind %q: permits = %v", kindPat, kind, !(kindPat == kind))
		}
		if Permits(nil, kind, payload) {
			t.Fatal("no capabilities permit something")
		}

		// Negation: with method pattern p and its negation !p, no string
		// method passes both. The one documented overlap is exact equality,
		// which wins before any pattern form (a method spelt "!p" matches
		// the capability "!p").
		if strings.HasPrefix(kindPat, "!") || isRegexPattern(kindPat) {
			return
		}
		method := kind
		if method == "!"+kindPat {
			return
		}
		req := MustPayload(map[string]any{"method": method})
		pos := Permits([]Capability{{Kind: "*", Payload: map[string]any{"method": kindPat}}}, "mcp/request", req)
		neg := Permits([]Capability{{Kind: "*", Payload: map[string]any{"method": "!" + kindPat}}}, "mcp/request", req)
		if pos == neg {
			t.Fatalf("method %q: pattern %q permits = %v and its negation permits = %v", method, kindPat, pos, neg)
		}
	})
}

// literal reports whether a kind pattern has no pattern syntax at all.
func literal(p string) bool {
	return !strings.ContainsAny(p, "*?") && !strings.HasPrefix(p, "!") && !isRegexPattern(p)
}

func isRegexPattern(p string) bool {
	return len(p) >= 2 && p[0] == '/' && p[len(p)-1] == '/'
}

// TestGlobStarBeforeLiteralStar pins the FuzzDecode finding: a `*` in the
// pattern was compared as a literal against a `*` in the value before it
// was taken as a wildcard, so `*` refused "*0" and `!*a` allowed "*ba".
func TestGlobStarBeforeLiteralStar(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "*0000000000000", true},
		{"*a", "*ba", true},
		{"!*a", "*ba", false},
		{"mcp/*", "mcp/*x", true},
		{"a*", "*a", false},
	} {
		if got := matchString(tc.pattern, tc.s); got != tc.want {
			t.Errorf("matchString(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

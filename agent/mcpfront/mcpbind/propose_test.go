package mcpbind

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/agent/mcpfront"
)

// frontParams are a call's params as the front end makes them of the
// name and arguments it parsed (mcpfront's admit).
func frontParams(t testing.TB, name string, args json.RawMessage) json.RawMessage {
	raw, err := json.Marshal(struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}{name, args})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The name and arguments the engine decides on are those of the params
// it sends and stores, byte for byte, whether Propose took them from the
// front end's parse or read the params again: input.tool.arguments and
// the decision log's copy of them do not depend on which.
func TestProposedCallIsTheParams(t *testing.T) {
	for _, args := range []string{
		``, `{}`, `null`, `{"a":1,"b":2}`, `{"path":"/tmp/x"}`, `[1,2]`,
		`{ "a" : 1 }`, "{\"a\":\n1}", `{"q":"a < b && c > d"}`, `{"s":"line\u2028sep"}`, "{\"s\":\"line\u2028sep\"}",
		`{"s":"tab\there"}`, `{"s":"é ü"}`, `{"s":"\u00e9"}`,
	} {
		var a json.RawMessage
		if args != "" {
			a = json.RawMessage(args)
		}
		params := frontParams(t, "add", a)
		p := mcpfront.Proposal{Params: params, Tool: mcpfront.Tool{Name: "add", Arguments: a}}
		name, got := proposedCall(p)
		wantName, want := toolCall(params)
		if name != wantName || !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("arguments %q: proposedCall = %q %q, the params say %q %q", args, name, got, wantName, want)
		}
	}
}

// FuzzProposedCall: whatever arguments the front end parsed, the engine
// decides on the arguments of the params it sends.
func FuzzProposedCall(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{ "a": "<&>" }`, "{\"s\":\"\u2029\"}", `[]`} {
		f.Add("add", s)
	}
	f.Fuzz(func(t *testing.T, name, args string) {
		if !json.Valid([]byte(args)) {
			return
		}
		params, err := json.Marshal(struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments,omitempty"`
		}{name, json.RawMessage(args)})
		if err != nil {
			return
		}
		var pn struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(params, &pn) != nil {
			return
		}
		// The front end's name is the one it parsed: the params' own.
		p := mcpfront.Proposal{Params: params, Tool: mcpfront.Tool{Name: pn.Name, Arguments: json.RawMessage(args)}}
		gotName, got := proposedCall(p)
		wantName, want := toolCall(params)
		if gotName != wantName || !bytes.Equal(got, want) {
			t.Fatalf("name %q arguments %q: proposedCall = %q %q, the params say %q %q", name, args, gotName, got, wantName, want)
		}
	})
}

// A client's clientInfo reaches input.proposer.client as it marshals,
// the next client's its own, not the last one's.
func TestClientJSONFollowsTheClient(t *testing.T) {
	b := New(Options{})
	for _, ci := range []mcpfront.ClientInfo{{Name: "a"}, {Name: "a"}, {Name: "b", Version: "1"}, {Name: "a", Title: "<t>"}} {
		want, _ := json.Marshal(ci)
		if got := b.clientJSON(ci); !bytes.Equal(got, want) {
			t.Errorf("clientJSON(%+v) = %s, want %s", ci, got, want)
		}
	}
}

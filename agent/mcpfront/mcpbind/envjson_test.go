package mcpbind

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/agent/mcpfront"
)

// sampleEnvelope is a call's envelope with every field set.
func sampleEnvelope() Envelope {
	return Envelope{ID: "0193b0a4-1234-7abc-8def-0123456789ab", RPCID: json.RawMessage(`12`), FrontEnd: mcpfront.FrontEnd, Server: "calc",
		Proposer: "local", Client: mcpfront.ClientInfo{Name: "claude-code", Version: "2.1.0", Title: "Claude Code"}, Method: "tools/call",
		Params: json.RawMessage(`{"name":"add","arguments":{"a":1,"b":2}}`),
		Tool: Tool{Name: "add", Listed: true, Description: "Adds two numbers.", InputSchema: json.RawMessage(`{"type":"object","required":["a","b"]}`),
			Annotations: json.RawMessage(`{"readOnlyHint":true}`), Digest: "sha256:00ff"},
		Changed: &mcpfront.ToolChange{Old: "sha256:00", New: "sha256:ff"}, Elicitation: true, Progress: true}
}

// The envelope the core keeps is json.Marshal's, byte for byte, whether
// written by hand or by json.Marshal: records, the decision log's
// input.proposal and the envelope cache's keys do not depend on which.
func TestMarshalEnvelopeIsJSONMarshal(t *testing.T) {
	edits := map[string]func(*Envelope){
		"all set":          func(*Envelope) {},
		"bare":             func(e *Envelope) { *e = Envelope{} },
		"no rpc id":        func(e *Envelope) { e.RPCID = nil },
		"string rpc id":    func(e *Envelope) { e.RPCID = json.RawMessage(`"abc"`) },
		"no params":        func(e *Envelope) { e.Params = nil },
		"empty params":     func(e *Envelope) { e.Params = json.RawMessage{} },
		"spaced params":    func(e *Envelope) { e.Params = json.RawMessage(`{"name": "add"}`) },
		"invalid schema":   func(e *Envelope) { e.Tool.InputSchema = json.RawMessage(`{"type":`) },
		"html in params":   func(e *Envelope) { e.Params = json.RawMessage(`{"name":"q","arguments":{"s":"a<b"}}`) },
		"html in string":   func(e *Envelope) { e.Tool.Description = "reads <files> & more" },
		"quote in string":  func(e *Envelope) { e.Client.Name = `say "hi"` },
		"unicode string":   func(e *Envelope) { e.Tool.Description = "lit les fichiers é\u2028" },
		"control string":   func(e *Envelope) { e.Server = "a\tb" },
		"not listed":       func(e *Envelope) { e.Tool = Tool{Name: "add"} },
		"unchanged":        func(e *Envelope) { e.Changed = nil },
		"no version":       func(e *Envelope) { e.Client = mcpfront.ClientInfo{Name: "x"} },
		"no elicitation":   func(e *Envelope) { e.Elicitation, e.Progress = false, false },
		"U+2028 in params": func(e *Envelope) { e.Params = json.RawMessage("{\"name\":\"a\u2028\"}") },
	}
	for name, edit := range edits {
		e := sampleEnvelope()
		edit(&e)
		want, werr := json.Marshal(e)
		got, gerr := marshalEnvelope(&e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Errorf("%s: marshalEnvelope = %s, %v; json.Marshal = %s, %v", name, got, gerr, want, werr)
		}
	}
	e := sampleEnvelope()
	if _, ok := appendEnvelope(nil, &e); !ok {
		t.Error("an envelope of plain strings and compact JSON was not written by hand")
	}
}

// FuzzMarshalEnvelope: any strings and raw values marshal as
// json.Marshal marshals them.
func FuzzMarshalEnvelope(f *testing.F) {
	f.Add("calc", "add", `{"name":"add","arguments":{"a":1}}`, `{"type":"object"}`, "desc", `7`, true)
	f.Add("c<", "a\"", `{"a": 1}`, ``, "é", `"x"`, false)
	f.Fuzz(func(t *testing.T, server, name, params, schema, desc, rpcID string, listed bool) {
		e := sampleEnvelope()
		e.Server, e.Tool.Name, e.Tool.Description, e.Tool.Listed = server, name, desc, listed
		e.Params, e.Tool.InputSchema, e.RPCID = json.RawMessage(params), json.RawMessage(schema), json.RawMessage(rpcID)
		want, werr := json.Marshal(e)
		got, gerr := marshalEnvelope(&e)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("marshalEnvelope = %s, %v; json.Marshal = %s, %v", got, gerr, want, werr)
		}
	})
}

package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// The direct parser must agree with the usual encoding/json → ast route.
func TestJSONToValueMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`null`, `true`, `false`, `0`, `-0`, `12`, `-3.25e+10`, `1E-7`, `""`, `"plain"`,
		`"esc\"aped\\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00"`,
		"\"utf-8 \u00e9\u4e2d\"",
		"\"bad utf-8 \xff\xfe\"",
		`[]`, `{}`, `[1,[2,[3,{}]]]`,
		` { "a" : 1 , "b" : [ true , null ] , "c" : { "d" : "e" } } `,
		`{"dup": 1, "x": 0, "dup": 2}`,
		manyKeys(40, true),
		`{"protocol":"mew/v0.4","id":"p","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"w","arguments":{"path":"/x","n":[1,2.5,-3]}}}}`,
		`123456789012345678901234567890`,
	}
	for _, doc := range docs {
		var x any
		if err := util.UnmarshalJSON([]byte(doc), &x); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		want, err := ast.InterfaceToValue(x)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jsonToValue([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		if got.Compare(want) != 0 {
			t.Errorf("%s:\ngot  %v\nwant %v", doc, got, want)
		}
	}
}

// manyKeys is an object with n keys k0…k(n-1), and with dup a repeat of k3
// at the end, which must win.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	if dup {
		b.WriteString(`,"k3":"last"`)
	}
	b.WriteString("}")
	return b.String()
}

// A proposal with very many keys must not take quadratic time.
func TestJSONToValueManyKeys(t *testing.T) {
	n := 200_000
	if testing.Short() {
		// A quarter of the keys: quadratic parsing is then a sixteenth of
		// hours, still far past the minute allowed below.
		n = 50_000
	}
	doc := manyKeys(n, true)
	start := time.Now()
	v, err := jsonToValue([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// A guard against quadratic parsing (hours at this size), not a speed
	// target: those are benchmarks. Generous, so a busy machine passes.
	if elapsed := time.Since(start); elapsed > time.Minute {
		t.Errorf("parsing %d bytes took %v", len(doc), elapsed)
	}
	obj := v.(ast.Object)
	if obj.Len() != n || obj.Get(ast.StringTerm("k3")).Value.Compare(ast.String("last")) != 0 {
		t.Errorf("len %d, k3 = %v", obj.Len(), obj.Get(ast.StringTerm("k3")))
	}
}

func TestJSONToValueErrors(t *testing.T) {
	bad := []string{
		``, ` `, `{`, `[`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
		`tru`, `nul`, `"abc`, "\"ctl\x01\"", `"bad \x escape"`, `{"a":1} x`, `[1 2]`, `{"a":1 "b":2}`,
		strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
	}
	for _, doc := range bad {
		if json.Valid([]byte(doc)) {
			t.Fatalf("test case %q is valid JSON", doc)
		}
		if _, err := jsonToValue([]byte(doc)); err == nil {
			t.Errorf("%q: no error", doc)
		}
	}
	_, err := jsonToValue([]byte("{\n  \"a\": 1,\n  \"b\": ]\n}"))
	var je *JSONError
	if !errors.As(err, &je) || je.Line != 3 {
		t.Errorf("err = %v, want a JSONError on line 3", err)
	}
}

// FuzzJSONToValue checks the parser against encoding/json on arbitrary
// input: same acceptance, same value.
func FuzzJSONToValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x",null]}`, `"\u00e9"`, `-1.5e3`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := jsonToValue(data)
		var x any
		werr := util.UnmarshalJSON(data, &x)
		if (err == nil) != (werr == nil) {
			if werr == nil && bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) > maxJSONDepth {
				return
			}
			t.Fatalf("%q: jsonToValue err %v, encoding/json err %v", data, err, werr)
		}
		if err != nil {
			return
		}
		want, _ := ast.InterfaceToValue(x)
		if got.Compare(want) != 0 {
			t.Fatalf("%q: got %v want %v", data, got, want)
		}
	})
}

func TestInputDocument(t *testing.T) {
	in := &Input{
		Proposal: json.RawMessage(`{"protocol":"mew/v0.4","id":"p-1","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/etc/x"}}}}`),
		Method:   "tools/call",
		Params:   json.RawMessage(`{"name":"write_file","arguments":{"path":"/etc/x"}}`),
		Tool: &Tool{Name: "write_file", Server: "fs", Arguments: json.RawMessage(`{"path":"/etc/x"}`),
			Description: "writes", Annotations: json.RawMessage(`{"destructiveHint":true,"readOnlyHint":false}`),
			OwnerAnnotations: json.RawMessage(`{"readOnlyHint":true}`)},
		Proposer: &Participant{ID: "coder", Capabilities: json.RawMessage(`[{"kind":"mcp/proposal"}]`)},
		Space:    &Space{ID: "dev", Participants: []Participant{{ID: "fs", Capabilities: json.RawMessage(`[]`)}}},
		Agent:    AgentInfo{ID: "fulfiller", Pending: 3, Inflight: 1, MaxPending: 1000},
		Approval: &Approval{By: []string{"alice"}, Content: json.RawMessage(`{"approve":true}`)},
		Now:      time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
		Grants:   []json.RawMessage{json.RawMessage(`{"id":"g-1","tool":"write_file"}`)},
	}
	got, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	// docs/design.md's input document, field for field.
	want := `{"agent":{"id":"fulfiller","inflight":1,"max_pending":1000,"pending":3},` +
		`"approval":{"by":["alice"],"content":{"approve":true}},` +
		`"grants":[{"id":"g-1","tool":"write_file"}],` +
		`"method":"tools/call",` +
		`"now":"2026-11-22T10:00:00Z",` +
		`"params":{"arguments":{"path":"/etc/x"},"name":"write_file"},` +
		`"proposal":{"from":"coder","id":"p-1","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"arguments":{"path":"/etc/x"},"name":"write_file"}},"protocol":"mew/v0.4"},` +
		`"proposer":{"capabilities":[{"kind":"mcp/proposal"}],"id":"coder"},` +
		`"space":{"id":"dev","participants":[{"capabilities":[],"id":"fs"}]},` +
		`"tool":{"annotations":{"destructiveHint":true,"readOnlyHint":false},"arguments":{"path":"/etc/x"},"description":"writes","name":"write_file",` +
		`"owner_annotations":{"readOnlyHint":true},"server":"fs"}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	// An MCP client's call (fulfiller mcp): the front end, the client's
	// clientInfo beside its id, and a tool whose definition changed.
	mcpIn := &Input{FrontEnd: "mcp", Method: "tools/call",
		Tool:     &Tool{Name: "read_file", Server: "fs", Changed: true, Digest: "sha256:new", PinnedDigest: "sha256:old"},
		Proposer: &Participant{ID: "local", Client: json.RawMessage(`{"name":"claude-code","version":"2.1.0"}`)}}
	got, err = json.Marshal(mcpIn)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"front_end":"mcp","method":"tools/call","proposer":{"client":{"name":"claude-code","version":"2.1.0"},"id":"local"},` +
		`"tool":{"changed":true,"digest":"sha256:new","name":"read_file","pinned_digest":"sha256:old","server":"fs"}}`
	if string(got) != want {
		t.Errorf("mcp input:\ngot  %s\nwant %s", got, want)
	}

	// A grant that is not an object is refused, never passed on.
	if _, err := json.Marshal(&Input{Grants: []json.RawMessage{json.RawMessage(`"g-1"`)}}); err == nil || !strings.Contains(err.Error(), "grants[0]: must be an object") {
		t.Errorf("a string grant: %v", err)
	}

	// Absent means absent.
	empty, _ := json.Marshal(&Input{})
	if string(empty) != `{}` {
		t.Errorf("empty input = %s", empty)
	}
	partial, _ := json.Marshal(&Input{Method: "tools/list", Tool: &Tool{Name: "x"}, Agent: AgentInfo{Pending: 0, MaxPending: 5}})
	if string(partial) != `{"agent":{"inflight":0,"max_pending":5,"pending":0},"method":"tools/list","tool":{"name":"x"}}` {
		t.Errorf("partial input = %s", partial)
	}
}

// Params and arguments that are the very bytes of the proposal's are taken
// from the parsed proposal; different bytes are parsed on their own.
func TestInputReusesProposalParts(t *testing.T) {
	in, err := InputFromEnvelope([]byte(`{"protocol":"mew/v0.4","from":"c","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"t","arguments":{"a":1}}}}`), testNow)
	if err != nil {
		t.Fatal(err)
	}
	v, err := in.Value()
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(ast.Object)
	params := obj.Get(ast.StringTerm("params")).Value
	fromProposal, _ := obj.Get(ast.StringTerm("proposal")).Value.Find(ast.MustParseRef("x.payload.params")[1:])
	if params != fromProposal {
		t.Error("params were parsed again instead of reused")
	}

	// Same shape, different bytes: must not be confused.
	in.Params = json.RawMessage(`{"name":"t","arguments":{"a":2}}`)
	in.Tool.Arguments = json.RawMessage(`{"a":2}`)
	v, _ = in.Value()
	b, _ := marshalValue(v)
	if !strings.Contains(string(b), `"params":{"arguments":{"a":2},"name":"t"}`) || !strings.Contains(string(b), `"tool":{"arguments":{"a":2},"name":"t"}`) {
		t.Errorf("input = %s", b)
	}
}

func TestParseEvalInput(t *testing.T) {
	env := `{"protocol":"mew/v0.4","id":"p-1","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/x"}}}}`
	doc, err := ParseEvalInput([]byte(env), testNow)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(doc)
	want := `{"front_end":"mew","method":"tools/call","now":"2026-11-22T10:00:00Z","params":{"arguments":{"path":"/tmp/x"},"name":"read_file"},` +
		`"proposal":{"from":"coder","id":"p-1","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"arguments":{"path":"/tmp/x"},"name":"read_file"}},"protocol":"mew/v0.4"},` +
		`"proposer":{"id":"coder"},"tool":{"arguments":{"path":"/tmp/x"},"name":"read_file"}}`
	if string(got) != want {
		t.Errorf("envelope:\ngot  %s\nwant %s", got, want)
	}

	// An MCP client's tools/call request, as fulfiller mcp sees it: the
	// same document, front_end "mcp", the request as the proposal; who
	// the client is and which upstream serves the tool are not guessed.
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/x"}}}`
	doc, envelope, err := ParseEvalInputWith([]byte(call), testNow, nil)
	if err != nil || !envelope {
		t.Fatalf("tools/call request: %v, completed %v", err, envelope)
	}
	got, _ = json.Marshal(doc)
	want = `{"front_end":"mcp","method":"tools/call","now":"2026-11-22T10:00:00Z","params":{"arguments":{"path":"/tmp/x"},"name":"read_file"},` +
		`"proposal":{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"path":"/tmp/x"},"name":"read_file"}},` +
		`"tool":{"arguments":{"path":"/tmp/x"},"name":"read_file"}}`
	if string(got) != want {
		t.Errorf("tools/call request:\ngot  %s\nwant %s", got, want)
	}
	for raw, msg := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`:                           `whose method is "tools/list": fulfiller mcp decides tools/call only`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`:                           "tools/call params must be an object",
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}`: "tools/call params must name the tool",
	} {
		if _, err := ParseEvalInput([]byte(raw), testNow); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: err %v, want one saying %q", raw, err, msg)
		}
	}

	// A full document is taken verbatim: nothing added, odd fields kept.
	full := `{"proposal":{"id":"p"},"method":"tools/call","custom":{"k":[1]}}`
	doc, err = ParseEvalInput([]byte(full), testNow)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(doc)
	if string(got) != `{"custom":{"k":[1]},"method":"tools/call","proposal":{"id":"p"}}` {
		t.Errorf("document: %s", got)
	}

	// A proposal without params, and a non-tools/call method.
	doc, err = ParseEvalInput([]byte(`{"protocol":"mew/v0.4","kind":"mcp/proposal","payload":{"method":"tools/list"}}`), testNow)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(doc)
	if !strings.HasPrefix(string(got), `{"front_end":"mew","method":"tools/list","now":"2026-11-22T10:00:00Z","proposal":`) || strings.Contains(string(got), `"params"`) || strings.Contains(string(got), `"tool"`) {
		t.Errorf("tools/list: %s", got)
	}

	// What the caller knows beyond the envelope completes the input built
	// around it; a full document is never completed.
	doc, envelope, err = ParseEvalInputWith([]byte(env), testNow, func(in *Input) error {
		in.Tool.Server, in.Tool.Annotations = "fs", json.RawMessage(`{"readOnlyHint":true}`)
		return nil
	})
	if err != nil || !envelope {
		t.Fatalf("completed envelope: %v (envelope %v)", err, envelope)
	}
	got, _ = json.Marshal(doc)
	if !strings.HasSuffix(string(got), `"tool":{"annotations":{"readOnlyHint":true},"arguments":{"path":"/tmp/x"},"name":"read_file","server":"fs"}}`) {
		t.Errorf("completed envelope: %s", got)
	}
	_, envelope, err = ParseEvalInputWith([]byte(full), testNow, func(*Input) error { return errors.New("called for a full document") })
	if err != nil || envelope {
		t.Errorf("full document: %v (envelope %v)", err, envelope)
	}

	for _, bad := range []struct{ in, msg string }{
		{`{"kind":"mcp/request","payload":{"method":"x"}}`, `kind is "mcp/request"`},
		{`[1]`, "neither an input document"},
		{`{"kind":"mcp/proposal","payload":{"params":{}}}`, "string method"},
		{`{"kind":"mcp/proposal","payload":{"method":"x","params":[1]}}`, "params must be an object"},
		{"{\n\"kind\": \"mcp/proposal\",\n\"payload\": }", "line 3"},
		{`{"proposal": 1} trailing`, "invalid character"},
	} {
		if _, err := ParseEvalInput([]byte(bad.in), testNow); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%s: err = %v, want it to contain %q", bad.in, err, bad.msg)
		}
	}
}

func TestDecideDocument(t *testing.T) {
	e := loadExamples(t)
	doc, err := ParseDocument([]byte(`{"proposal":{},"method":"tools/call","tool":{"name":"read_file","arguments":{}},"proposer":{"id":"coder"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := e.DecideDocument(t.Context(), doc); d.Action != Fulfill || d.Revision != e.Revision() {
		t.Errorf("decision = %+v", d)
	}
	d, x := e.ExplainDocument(t.Context(), doc)
	if d.Action != Fulfill || len(x.Rules) == 0 {
		t.Errorf("explain = %+v %+v", d, x)
	}
	if _, err := ParseDocument([]byte(`[1]`)); err == nil {
		t.Error("array accepted as a document")
	}
}

// DecideJSON decides a logged input as DecideDocument does, and refuses
// what is no input document without deciding it (replay counts those).
func TestDecideJSON(t *testing.T) {
	e := loadExamples(t)
	d, err := e.DecideJSON(t.Context(), []byte(`{"proposal":{},"method":"tools/call","tool":{"name":"read_file","arguments":{}},"proposer":{"id":"coder"}}`))
	if err != nil || d.Action != Fulfill || d.Revision != e.Revision() {
		t.Errorf("decision = %+v, %v", d, err)
	}
	for _, bad := range []string{`[1]`, `"x"`, `{"proposal":`} {
		if d, err := e.DecideJSON(t.Context(), []byte(bad)); err == nil || d.Action != "" {
			t.Errorf("DecideJSON(%s) = %+v, %v; want no decision and an error", bad, d, err)
		}
	}
}

// The input cache hands back a proposer's or the agent's value only for
// the same id, capabilities and counts: every input built through one
// cache, in any order, is the document built without it.
func TestInputCacheKeepsProposersAndCountsApart(t *testing.T) {
	var cache inputCache
	caps := []json.RawMessage{nil, json.RawMessage(`[{"kind":"mcp/proposal"}]`), json.RawMessage(`[{"kind":"chat"}]`), json.RawMessage(`[]`)}
	var inputs []*Input
	for _, id := range []string{"coder", "mallory", ""} {
		for _, c := range caps {
			for _, a := range []AgentInfo{{}, {ID: "fulfiller", Pending: 1, MaxPending: 50}, {ID: "fulfiller", Pending: 51, MaxPending: 50}, {Pending: 1, Inflight: 2, MaxPending: 50}} {
				inputs = append(inputs, &Input{Method: "tools/call", Proposer: &Participant{ID: id, Capabilities: c}, Agent: a})
				for _, client := range []string{`{"name":"claude-code","version":"2.1.0"}`, `{"name":"claude-code","version":"2.2.0"}`} {
					inputs = append(inputs, &Input{Method: "tools/call", Proposer: &Participant{ID: id, Capabilities: c, Client: json.RawMessage(client)}, Agent: a})
				}
			}
		}
	}
	for round := range 2 {
		for i, in := range inputs {
			v, err := in.value(&cache, allFields)
			if err != nil {
				t.Fatal(err)
			}
			want, err := in.value(nil, allFields)
			if err != nil {
				t.Fatal(err)
			}
			if v.Compare(want) != 0 {
				t.Fatalf("round %d, input %d: cached %v, built %v", round, i, v, want)
			}
		}
	}
}

// EvaluatedInput is the document Decide evaluates: only the fields the
// loaded policies read (the example policies read no proposal, params,
// space or now), and deciding it as JSON decides as Decide does.
func TestEvaluatedInput(t *testing.T) {
	e := loadExamples(t)
	for _, in := range []*Input{
		smallCall(t, "read_file", `{"path":"/srv/app/config.yaml"}`),
		smallCall(t, "write_file", `{"path":"/srv/dev/app.conf"}`),
		benchInput(t),
	} {
		doc, err := e.EvaluatedInput(in)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(doc, &fields); err != nil {
			t.Fatal(err)
		}
		keys := slices.Sorted(maps.Keys(fields))
		if want := []string{"agent", "method", "proposer", "tool"}; !slices.Equal(keys, want) {
			t.Errorf("fields %v, want %v", keys, want)
		}
		want := e.Decide(t.Context(), in)
		got, err := e.DecideJSON(t.Context(), doc)
		if err != nil || got.Action != want.Action || got.Message != want.Message || got.Err != nil {
			t.Errorf("DecideJSON(%s) = %+v, %v; Decide = %+v", doc, got, err, want)
		}
	}
}

package policies

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"
)

// benchInput is a realistic ~1 KB tools/call proposal, built the way the
// sidecar builds inputs: Params and Tool.Arguments are the raw bytes
// encoding/json hands out when decoding the envelope. The call writes a
// config file to production, which the example policies escalate.
func benchInput(b testing.TB) *Input {
	return benchCall(b, "write_file", `{"path":"/srv/prod/nginx/app.conf","content":"`+benchContent+`","mode":"0644","create_dirs":true,"tags":["nginx","web","tls"]}`)
}

var benchContent = strings.Repeat("server { listen 443 ssl; root /srv/app; } ", 14)

func benchCall(b testing.TB, tool, args string) *Input {
	b.Helper()
	in := smallCall(b, tool, args)
	if n := len(in.Proposal); n < 900 || n > 1300 {
		b.Fatalf("proposal is %d bytes, want about 1 KB", n)
	}
	return in
}

// smallCall is a tools/call proposal with args as its arguments, built the
// way the sidecar builds inputs, of whatever size args make it.
func smallCall(b testing.TB, tool, args string) *Input {
	b.Helper()
	env := `{"protocol":"mew/v0.4","id":"coder-7f3a9c2e","ts":"2026-11-22T10:00:00.123Z","from":"coder","to":["fulfiller"],` +
		`"kind":"mcp/proposal","correlation_id":["chat-41"],"context":"deploy/web",` +
		`"payload":{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"` + tool + `",` +
		`"arguments":` + args + `,"_meta":{"progressToken":"t-17"}}}}`
	var frame struct {
		Payload struct {
			Params json.RawMessage `json:"params"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(env), &frame); err != nil {
		b.Fatal(err)
	}
	var call struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(frame.Payload.Params, &call); err != nil {
		b.Fatal(err)
	}
	caps := json.RawMessage(`[{"kind":"mcp/proposal"},{"kind":"chat"},{"kind":"mcp/withdraw"}]`)
	in := &Input{
		Proposal: json.RawMessage(env),
		Method:   "tools/call",
		Params:   frame.Payload.Params,
		Tool: &Tool{Name: tool, Server: "fs", Arguments: call.Arguments,
			Description: "Files on the web servers", Annotations: json.RawMessage(`{"title":"Files","destructiveHint":true}`)},
		Proposer: &Participant{ID: "coder", Capabilities: caps},
		Space: &Space{ID: "dev", Participants: []Participant{
			{ID: "fs", Capabilities: json.RawMessage(`[{"kind":"mcp/response"},{"kind":"mcp/request","payload":{"method":"notifications/*"}}]`)},
			{ID: "coder", Capabilities: caps},
			{ID: "fulfiller", Capabilities: json.RawMessage(`[{"kind":"*"}]`)},
			{ID: "alice", Capabilities: json.RawMessage(`[{"kind":"mcp/response"},{"kind":"chat"}]`)},
		}},
		Agent: AgentInfo{ID: "fulfiller", Pending: 3, Inflight: 1, MaxPending: 1000},
		Now:   testNow,
	}
	return in
}

// BenchmarkDecide is the hot path: one decision with the example policies
// on a ~1 KB proposal, for each of the three outcomes. The escalation is
// the most expensive: every argument string is checked against the
// production targets and the matches make up the message.
func BenchmarkDecide(b *testing.B) {
	benchDecisions(b, loadExamples(b), []decisionCase{
		{"fulfill", benchCall(b, "search_files", `{"path":"/srv/app","query":"`+benchContent+`","max_results":50,"include":["*.conf","*.yaml"]}`), Fulfill},
		{"reject", benchCall(b, "write_file", `{"path":"/srv/dev/nginx/app.conf","content":"`+benchContent+`","mode":"0644","create_dirs":true,"tags":["nginx","web","tls"]}`), Reject},
		{"escalate", benchInput(b), Escalate},
	})
}

// BenchmarkDecideBenchMix decides the proposals `fulfiller bench` sends
// (internal/loadtest's synthetic mix: a read_file of one path, fulfilled;
// a small write_file no rule allows, rejected), which are what its
// comparison with an OPA server measures. With inputs this small the
// engine's fixed cost per evaluation is most of a decision.
func BenchmarkDecideBenchMix(b *testing.B) {
	benchDecisions(b, loadExamples(b), []decisionCase{
		{"fulfill", smallCall(b, "read_file", `{"path":"/srv/app/config.yaml"}`), Fulfill},
		{"reject", smallCall(b, "write_file", `{"path":"/srv/dev/app/config.yaml","content":"listen: :9090\n"}`), Reject},
	})
}

// decisionCase is one input a benchmark decides, and the action it must get.
type decisionCase struct {
	name string
	in   *Input
	want Action
}

// benchDecisions runs a sub-benchmark deciding each case with e, after
// checking once that it decides as it should.
func benchDecisions(b *testing.B, e *Engine, cases []decisionCase) {
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			if d := e.Decide(ctx, bc.in); d.Action != bc.want || d.Err != nil {
				b.Fatalf("decision = %+v, want %s", d, bc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				e.Decide(ctx, bc.in)
			}
		})
	}
}

// BenchmarkEngineOverhead is what the engine itself costs per decision on
// the ~1 KB proposal, with a policy that does nothing but read the whole
// input: building it, the evaluation's fixed cost, reading the decision.
// The rest of BenchmarkDecide is the example policy's own Rego.
func BenchmarkEngineOverhead(b *testing.B) {
	e := loadInline(b, `package fulfiller

decision := {"action": "fulfill"} if {
	input.proposal.id
	input.space.id
	input.tool.arguments
}`)
	in := benchInput(b)
	ctx := b.Context()
	if d := e.Decide(ctx, in); d.Action != Fulfill {
		b.Fatalf("decision = %+v", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Decide(ctx, in)
	}
}

// BenchmarkDecideParallel is BenchmarkDecide/escalate from every P at once.
func BenchmarkDecideParallel(b *testing.B) {
	e := loadExamples(b)
	in := benchInput(b)
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.Decide(ctx, in)
		}
	})
}

// BenchmarkInputValue is the input-building share of a decision.
func BenchmarkInputValue(b *testing.B) {
	e := loadExamples(b)
	in := benchInput(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.value(&e.cache, allFields); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputValueBenchMix is the input-building share of
// BenchmarkDecideBenchMix/fulfill: only the fields the example policies
// read, through the engine's cache, as Decide builds it.
func BenchmarkInputValueBenchMix(b *testing.B) {
	e := loadExamples(b)
	in := smallCall(b, "read_file", `{"path":"/srv/app/config.yaml"}`)
	need := e.cur.Load().need
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.value(&e.cache, need); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInputMapRoute evaluates the same decision the conventional
// way — the input as map[string]any, converted by rego on each call —
// for comparison with BenchmarkDecide.
func BenchmarkInputMapRoute(b *testing.B) {
	e := loadExamples(b)
	in := benchInput(b)
	ctx := b.Context()
	set := e.cur.Load()
	b.ReportAllocs()
	for b.Loop() {
		rs, err := set.query.Eval(ctx, rego.EvalInput(inputMap(b, in)))
		if err != nil || len(rs) != 1 {
			b.Fatal(err)
		}
		if _, err := parseDecision(rs[0].Expressions[0].Value.(*ast.Term).Value); err != nil {
			b.Fatal(err)
		}
	}
}

// inputMap builds the input document as map[string]any, decoding each raw
// part with encoding/json: the straightforward alternative to Input.value.
func inputMap(b *testing.B, in *Input) map[string]any {
	raw := func(r json.RawMessage) any {
		var x any
		if err := util.UnmarshalJSON(r, &x); err != nil {
			b.Fatal(err)
		}
		return x
	}
	participants := make([]any, len(in.Space.Participants))
	for i, p := range in.Space.Participants {
		participants[i] = map[string]any{"id": p.ID, "capabilities": raw(p.Capabilities)}
	}
	return map[string]any{
		"proposal": raw(in.Proposal),
		"method":   in.Method,
		"params":   raw(in.Params),
		"tool": map[string]any{
			"name": in.Tool.Name, "server": in.Tool.Server, "arguments": raw(in.Tool.Arguments),
			"description": in.Tool.Description, "annotations": raw(in.Tool.Annotations),
		},
		"proposer": map[string]any{"id": in.Proposer.ID, "capabilities": raw(in.Proposer.Capabilities)},
		"space":    map[string]any{"id": in.Space.ID, "participants": participants},
		"agent": map[string]any{"id": in.Agent.ID, "pending": in.Agent.Pending,
			"inflight": in.Agent.Inflight, "max_pending": in.Agent.MaxPending},
		"now": in.Now.UTC().Format(time.RFC3339Nano),
	}
}

func BenchmarkExplain(b *testing.B) {
	e := loadExamples(b)
	in := benchInput(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		e.Explain(ctx, in)
	}
}

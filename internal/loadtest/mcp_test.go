package loadtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/policies"
)

// mcpCalcEnv, in this test binary's environment, makes it the MCP
// bench's child tool server (ServeCalculator) instead of the tests, as
// `fulfiller bench mcp-tool-server` is for the command.
const mcpCalcEnv = "FULFILLER_TEST_MCP_CALC"

func init() {
	if os.Getenv(mcpCalcEnv) != "" {
		if err := ServeCalculator(context.Background()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// checkMCPReport asserts what a user reads in a passing report: every
// call answered on both sides, the ratio and the added µs computed
// from the two p50s.
func checkMCPReport(t *testing.T, rep *MCPReport, transport string, clients, calls int) {
	t.Helper()
	if !rep.OK() || rep.Errors != 0 || rep.Unanswered != 0 || rep.FirstError != "" {
		t.Fatalf("report not OK: %+v", rep)
	}
	if rep.FrontEnd != "mcp" || rep.Transport != transport || rep.Clients != clients || rep.Calls != calls {
		t.Errorf("report says front end %q over %q, %d clients, %d calls; want mcp over %q, %d, %d", rep.FrontEnd, rep.Transport, rep.Clients, rep.Calls, transport, clients, calls)
	}
	if rep.Direct.Count != calls || rep.Relayed.Count != calls || rep.Proxied.Count != calls {
		t.Errorf("answered %d direct, %d relayed and %d proxied calls, want %d each", rep.Direct.Count, rep.Relayed.Count, rep.Proxied.Count, calls)
	}
	if got, want := rep.RelayRatioP50, rep.Relayed.P50/rep.Direct.P50; got != want {
		t.Errorf("relay_ratio_p50 %v, want relayed p50 ÷ direct p50 = %v", got, want)
	}
	if got, want := rep.OverRelayP50, rep.Proxied.P50-rep.Relayed.P50; got != want {
		t.Errorf("over_relay_p50_us %v, want %v", got, want)
	}
	if rep.Direct.P50 <= 0 || rep.Proxied.P50 <= 0 || rep.Seconds <= 0 || rep.ProxiedPerSec <= 0 {
		t.Errorf("no latency or throughput: %+v", rep)
	}
	if got, want := rep.RatioP50, rep.Proxied.P50/rep.Direct.P50; got != want {
		t.Errorf("ratio_p50 %v, want proxied p50 ÷ direct p50 = %v", got, want)
	}
	if got, want := rep.AddedP50, rep.Proxied.P50-rep.Direct.P50; got != want {
		t.Errorf("added_p50_us %v, want %v", got, want)
	}
	wantText := []string{"front end: mcp over " + transport, "direct", "relayed", "proxied", "proxied ÷ direct: p50", "bare relay ÷ direct: p50", "fulfiller over the relay", "errors: 0, unanswered: 0"}
	if transport == MCPStdio {
		// Over stdio on both sides, the raw line relay is measured too.
		if rep.LineRelayed.Count != calls {
			t.Errorf("answered %d calls through the raw line relay, want %d", rep.LineRelayed.Count, calls)
		}
		if got, want := rep.LineRelayRatioP50, rep.LineRelayed.P50/rep.Direct.P50; got != want {
			t.Errorf("line_relay_ratio_p50 %v, want raw relay p50 ÷ direct p50 = %v", got, want)
		}
		if got, want := rep.OverLineRelayP50, rep.Proxied.P50-rep.LineRelayed.P50; got != want {
			t.Errorf("over_line_relay_p50_us %v, want %v", got, want)
		}
		if rep.PolicyFloor.Count != calls {
			t.Errorf("answered %d calls through the policy floor, want %d", rep.PolicyFloor.Count, calls)
		}
		if got, want := rep.PolicyFloorRatioP50, rep.PolicyFloor.P50/rep.Direct.P50; got != want {
			t.Errorf("policy_floor_ratio_p50 %v, want floor p50 ÷ direct p50 = %v", got, want)
		}
		if got, want := rep.PolicyFloorAddedP50, rep.PolicyFloor.P50-rep.Direct.P50; got != want {
			t.Errorf("policy_floor_added_p50_us %v, want %v", got, want)
		}
		if got, want := rep.OverPolicyFloorP50, rep.Proxied.P50-rep.PolicyFloor.P50; got != want {
			t.Errorf("over_policy_floor_p50_us %v, want %v", got, want)
		}
		wantText = append(wantText, "raw relay ", "raw line relay ÷ direct: p50", "fulfiller over the raw relay",
			"floor ", "policy floor (the raw relay deciding each call once) ÷ direct: p50", "fulfiller over the floor")
	} else if rep.LineRelayed.Count != 0 || rep.PolicyFloor.Count != 0 {
		t.Errorf("%d calls through the raw line relay and %d through the policy floor over %s: they are stdio's only", rep.LineRelayed.Count, rep.PolicyFloor.Count, transport)
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, want := range wantText {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestRunMCPOverHTTP(t *testing.T) {
	rep, err := RunMCP(t.Context(), MCPConfig{Transport: MCPHTTP, Clients: 3, Calls: 60, PolicyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkMCPReport(t, rep, MCPHTTP, 3, 60)
}

// Over stdio the tool server is a child (this test binary) on its stdio,
// once for the direct client and once as the front end's upstream.
func TestRunMCPOverStdio(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunMCP(t.Context(), MCPConfig{Transport: MCPStdio, Child: []string{exe}, ChildEnv: []string{mcpCalcEnv + "=1"}, Clients: 1, Calls: 40, PolicyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	checkMCPReport(t, rep, MCPStdio, 1, 40)
}

// A proxied call the policy refuses is an error of the run: the bench
// measures allowed calls, and says why one was not.
func TestRunMCPRefusedCallFailsTheRun(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "deny.rego")
	const deny = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "the bench may not add"}
`
	if err := os.WriteFile(policy, []byte(deny), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := RunMCP(t.Context(), MCPConfig{Transport: MCPHTTP, Clients: 1, Calls: 10, Policies: []string{policy}, PolicyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Errors == 0 {
		t.Fatalf("a run whose calls are refused is OK: %+v", rep)
	}
	if !strings.Contains(rep.FirstError, "proxied") || !strings.Contains(rep.FirstError, "the bench may not add") {
		t.Errorf("first error %q: want the proxied call's refusal with the policy's message", rep.FirstError)
	}
}

func TestRunMCPPolicyErrorIsErrPolicy(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "broken.rego")
	if err := os.WriteFile(policy, []byte("package fulfiller\n\ndecision := {"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := RunMCP(t.Context(), MCPConfig{Transport: MCPHTTP, Clients: 1, Calls: 1, Policies: []string{policy}, PolicyTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "broken.rego") {
		t.Fatalf("err %v: want the policy's error naming broken.rego", err)
	}
	if !errors.Is(err, ErrPolicy) {
		t.Errorf("err %v is not ErrPolicy", err)
	}
}

// The raw load: clients speaking Streamable HTTP themselves, every
// answer checked to be exactly the calculator's, the tool server behind
// the front end over HTTP in this process and as a child on stdio.
func TestRunMCPRawLoad(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, upstream := range []string{MCPHTTP, MCPStdio} {
		t.Run(upstream, func(t *testing.T) {
			rep, err := RunMCP(t.Context(), MCPConfig{Transport: MCPHTTP, Upstream: upstream, Load: LoadRaw,
				Child: []string{exe}, ChildEnv: []string{mcpCalcEnv + "=1"}, Clients: 3, Calls: 90, PolicyTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Errors != 0 || rep.Unanswered != 0 || rep.FirstError != "" {
				t.Fatalf("report not OK: %+v", rep)
			}
			if rep.Load != LoadRaw || rep.Upstream != upstream || rep.Transport != MCPHTTP || !rep.ProxiedOnly {
				t.Errorf("report says load %q, upstream %q, transport %q, proxied only %v; want raw, %s, http, true", rep.Load, rep.Upstream, rep.Transport, rep.ProxiedOnly, upstream)
			}
			if rep.Proxied.Count != 90 || rep.Direct.Count != 0 || rep.Relayed.Count != 0 {
				t.Errorf("answered %d proxied, %d direct, %d relayed calls; want 90, 0, 0", rep.Proxied.Count, rep.Direct.Count, rep.Relayed.Count)
			}
			if rep.ProxiedPerSec <= 0 || rep.Proxied.P50 <= 0 {
				t.Errorf("no throughput or latency: %+v", rep)
			}
			var text strings.Builder
			rep.WriteText(&text)
			if want := "front end: mcp over http, tool server over " + upstream + ", 3 raw clients"; !strings.Contains(text.String(), want) {
				t.Errorf("text report lacks %q:\n%s", want, text.String())
			}
			if got := strings.Contains(text.String(), "tool server children"); got != (upstream == MCPStdio) {
				t.Errorf("text report names the tool server children's CPU: %v, want %v (only over stdio):\n%s", got, upstream == MCPStdio, text.String())
			}
		})
	}
}

// A raw client fails the run on an answer that is not exactly the
// calculator's, and on a refusal.
func TestRunMCPRawLoadWrongAnswerFails(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "deny.rego")
	const deny = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "the bench may not add"}
`
	if err := os.WriteFile(policy, []byte(deny), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := RunMCP(t.Context(), MCPConfig{Transport: MCPHTTP, Load: LoadRaw, Clients: 2, Calls: 10, Policies: []string{policy}, PolicyTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Errors == 0 {
		t.Fatalf("a raw run whose calls are refused is OK: %+v", rep)
	}
	if !strings.Contains(rep.FirstError, "proxied") || !strings.Contains(rep.FirstError, "the bench may not add") {
		t.Errorf("first error %q: want the proxied call's refusal with the policy's message", rep.FirstError)
	}
}

// The raw client's check itself: the same JSON in another key order
// passes, another sum or id does not.
func TestRawAnswerCheck(t *testing.T) {
	want := []byte(`{"jsonrpc":"2.0","id":"c0-0000000001","result":{"content":[{"type":"text","text":"3"}]}}`)
	for _, tc := range []struct {
		got string
		ok  bool
	}{
		{`{"id":"c0-0000000001","jsonrpc":"2.0","result":{"content":[{"text":"3","type":"text"}]}}`, true},
		{`{"jsonrpc":"2.0","id":"c0-0000000001","result":{"content":[{"type":"text","text":"4"}]}}`, false},
		{`{"jsonrpc":"2.0","id":"c0-0000000002","result":{"content":[{"type":"text","text":"3"}]}}`, false},
		{`{"jsonrpc":"2.0","id":"c0-0000000001","result":{"content":[{"type":"text","text":"3"}],"isError":true}}`, false},
		{`not json`, false},
	} {
		if err := sameJSON([]byte(tc.got), want); (err == nil) != tc.ok {
			t.Errorf("sameJSON(%s): %v, want ok=%v", tc.got, err, tc.ok)
		}
	}
}

// The policy floor decides as the front end does: a call the policy
// refuses never reaches the tool server and is answered isError with
// the same id; an allowed call and every other frame are forwarded.
func TestPolicyFloorDecidesEachCall(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "floor.rego")
	const only = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy"}

decision := {"action": "fulfill"} if {
	input.front_end == "mcp"
	input.tool.server == "calc"
	input.tool.name == "add"
	input.tool.arguments.a == 1
	input.proposer.id == "bench"
}
`
	if err := os.WriteFile(policy, []byte(only), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := policies.Load(t.Context(), policies.Options{Policies: []string{policy}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d := &floorDecider{eng: eng, client: "bench"}
	for _, fwd := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}` + "\n",
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n",
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n",
	} {
		if reply := d.decide([]byte(fwd)); reply != nil {
			t.Errorf("floor refused %s with %s, want it forwarded", fwd, reply)
		}
	}
	reply := d.decide([]byte(`{"jsonrpc":"2.0","id":"x7","method":"tools/call","params":{"name":"add","arguments":{"a":5,"b":2}}}` + "\n"))
	const want = `{"jsonrpc":"2.0","id":"x7","result":{"content":[{"type":"text","text":"refused: policy"}],"isError":true}}` + "\n"
	if string(reply) != want {
		t.Errorf("floor's refusal = %s, want %s", reply, want)
	}
}

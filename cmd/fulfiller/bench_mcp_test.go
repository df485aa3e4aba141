package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchMCPUsageErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "--front-end", "grpc"}, "--front-end"},
		{[]string{"bench", "--front-end", "mcp", "--mcp-transport", "ws"}, "--mcp-transport"},
		{[]string{"bench", "--front-end", "mcp", "--calls", "0"}, "--calls"},
		{[]string{"bench", "--front-end", "mcp", "--clients", "-1"}, "--clients"},
		{[]string{"bench", "--front-end", "mcp", "--call-timeout", "0s"}, "--call-timeout"},
		{[]string{"bench", "--front-end", "mcp", "--proposers", "2"}, "--proposers"},
		{[]string{"bench", "--front-end", "mcp", "--state", "none"}, "--state"},
		{[]string{"bench", "--front-end", "mcp", "--data", "x.yaml"}, "--data"},
		{[]string{"bench", "--calls", "10"}, "--calls"},
		{[]string{"bench", "--mcp-transport", "http"}, "--mcp-transport"},
		{[]string{"bench", "--front-end", "mcp", "--mcp-upstream", "ws"}, "--mcp-upstream"},
		{[]string{"bench", "--front-end", "mcp", "--mcp-transport", "http", "--load", "wrk"}, "--load"},
		{[]string{"bench", "--front-end", "mcp", "--load", "raw"}, "--load raw"},
		{[]string{"bench", "--load", "raw"}, "--load"},
	} {
		_, stderr, code := cli(t, "", tc.args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %s", tc.args, code, stderr, tc.flag)
		}
	}
}

// bench --front-end mcp --json reports both sides of every call and
// their ratio, and exits 0 when every call was answered.
func TestBenchMCPReport(t *testing.T) {
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			// Over stdio the tool server is this program re-executed
			// (bench mcp-tool-server): the test binary, made fulfiller
			// by the environment it inherits.
			stdout, stderr, code := cliEnv(t, "", map[string]string{asFulfiller: "1"}, "bench", "--front-end", "mcp", "--mcp-transport", transport, "--calls", "30", "--clients", "2", "--json")
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			var rep struct {
				FrontEnd  string  `json:"front_end"`
				Transport string  `json:"transport"`
				Clients   int     `json:"clients"`
				Calls     int     `json:"calls"`
				RatioP50  float64 `json:"ratio_p50"`
				AddedP50  float64 `json:"added_p50_us"`
				PerSec    float64 `json:"proxied_calls_per_sec"`
				Errors    int     `json:"errors"`
				Unanswer  int     `json:"unanswered"`
				Direct    struct {
					Count int     `json:"count"`
					P50   float64 `json:"p50_us"`
				} `json:"direct"`
				Relayed struct {
					Count int `json:"count"`
				} `json:"relayed"`
				Proxied struct {
					Count int     `json:"count"`
					P50   float64 `json:"p50_us"`
				} `json:"proxied"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("%v: %s", err, stdout)
			}
			if rep.FrontEnd != "mcp" || rep.Transport != transport || rep.Clients != 2 || rep.Calls != 30 || rep.Errors != 0 || rep.Unanswer != 0 {
				t.Errorf("report %+v: want mcp over %s, 2 clients, 30 calls, no errors", rep, transport)
			}
			if rep.Direct.Count != 30 || rep.Relayed.Count != 30 || rep.Proxied.Count != 30 || rep.PerSec <= 0 {
				t.Errorf("answered %d direct, %d relayed, %d proxied (%v/s): want 30 each", rep.Direct.Count, rep.Relayed.Count, rep.Proxied.Count, rep.PerSec)
			}
			if rep.Direct.P50 <= 0 || rep.RatioP50 != rep.Proxied.P50/rep.Direct.P50 || rep.AddedP50 != rep.Proxied.P50-rep.Direct.P50 {
				t.Errorf("ratio %v, added %v µs from p50s %v and %v", rep.RatioP50, rep.AddedP50, rep.Proxied.P50, rep.Direct.P50)
			}
		})
	}
}

// A run whose calls fail exits 1 (so it can gate CI) and says why.
func TestBenchMCPErrorsFailTheRun(t *testing.T) {
	parallelCLI(t)
	policy := filepath.Join(t.TempDir(), "deny.rego")
	if err := os.WriteFile(policy, []byte("package fulfiller\n\nimport rego.v1\n\ndefault decision := {\"action\": \"reject\", \"reason\": \"policy\", \"message\": \"no adding today\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cli(t, "", "bench", "--front-end", "mcp", "--mcp-transport", "http", "--calls", "5", "--policy", policy)
	if code != 1 || !strings.Contains(stderr, "bench failed") || !strings.Contains(stderr, "no adding today") {
		t.Fatalf("exit %d, stderr %q: want exit 1 naming the refusal", code, stderr)
	}
	if !strings.Contains(stdout, "first error: proxied") {
		t.Errorf("report lacks the first error:\n%s", stdout)
	}
}

// --load raw: the front end under clients that speak Streamable HTTP
// themselves, the tool server a child on stdio; every call answered.
func TestBenchMCPRawLoadReport(t *testing.T) {
	stdout, stderr, code := cliEnv(t, "", map[string]string{asFulfiller: "1"}, "bench", "--front-end", "mcp", "--mcp-transport", "http", "--mcp-upstream", "stdio", "--load", "raw", "--calls", "40", "--clients", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	var rep struct {
		Transport   string `json:"transport"`
		Upstream    string `json:"upstream"`
		Load        string `json:"load"`
		ProxiedOnly bool   `json:"proxied_only"`
		Errors      int    `json:"errors"`
		Unanswer    int    `json:"unanswered"`
		Proxied     struct {
			Count int `json:"count"`
		} `json:"proxied"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if rep.Transport != "http" || rep.Upstream != "stdio" || rep.Load != "raw" || !rep.ProxiedOnly || rep.Errors != 0 || rep.Unanswer != 0 || rep.Proxied.Count != 40 {
		t.Errorf("report %+v: want raw load over http, the tool server on stdio, 40 proxied calls answered", rep)
	}
}

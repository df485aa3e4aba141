package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestBenchUsageErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"bench", "--proposers", "0"}, "--proposers"},
		{[]string{"bench", "--proposals", "-5"}, "--proposals"},
		{[]string{"bench", "--rate", "-1"}, "--rate"},
		{[]string{"bench", "--mix", "fulfil=60,escalate=40"}, "--mix"},
		{[]string{"bench", "--from", "/nonexistent/proposals.jsonl"}, "--from"},
		{[]string{"bench", "--max-pending", "0"}, "--max-pending"},
		{[]string{"bench", "--opa-bin", "/usr/bin/opa"}, "--opa-bin"},
		{[]string{"bench", "--window", "0"}, "--window"},
		{[]string{"bench", "--policy-timeout", "0s"}, "--policy-timeout"},
		{[]string{"bench", "--state", ""}, "--state"},
		{[]string{"bench", "--state", "nats://user:secret@127.0.0.1:4222"}, "--state"},
		{[]string{"bench", "--state", "none", "--state-compare"}, "--state none"},
		{[]string{"bench", "--state", "memory", "--state-compare"}, "--state-compare"},
		{[]string{"bench", "--state", "http://127.0.0.1:4222"}, "--state"},
		{[]string{"bench", "--state-compare"}, "--state-compare"},
		{[]string{"bench", "--state", "/tmp/x", "--state-creds", "/tmp/creds"}, "--state-creds"},
		{[]string{"bench", "--state", "/tmp/x", "--state-compare", "--vs-opa-server"}, "--state-compare"},
		{[]string{"bench", "--state", "/tmp/x", "--rounds", "3"}, "--rounds"},
		{[]string{"bench", "--rounds", "2"}, "--rounds"},
		{[]string{"bench", "--tool-style", "sdk", "--rounds", "2"}, "--rounds"},
		{[]string{"bench", "--state", "nats://127.0.0.1:4222", "--state-creds", "/nonexistent/bench.creds"}, "--state-creds"},
		{[]string{"bench", "--state", "bench_test.go"}, "--state"},
		{[]string{"bench", "--state", "/tmp/x", "--state-compare", "--rounds", "0"}, "--rounds"},
		{[]string{"bench", "--tool-style", "bridge"}, "--tool-style"},
		{[]string{"bench", "--state", "/tmp/x", "--state-compare", "--state-baseline", "disk"}, "--state-baseline"},
		{[]string{"bench", "--state", "/tmp/x", "--state-baseline", "none"}, "--state-baseline"},
		{[]string{"bench", "--tool-style", "compare", "--vs-opa-server"}, "--tool-style"},
		{[]string{"bench", "--memory-limit", "-1"}, "--memory-limit"},
		{[]string{"bench", "--memory-limit", "lots"}, "--memory-limit"},
	} {
		_, stderr, code := cli(t, "", tc.args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %s", tc.args, code, stderr, tc.flag)
		}
	}
}

// A --state URL with a password in it is refused without echoing the
// password to the terminal or a log.
func TestBenchStateURLSecretNotEchoed(t *testing.T) {
	_, stderr, code := cli(t, "", "bench", "--state", "nats://bench:hunter2@127.0.0.1:4222")
	if code != 2 || strings.Contains(stderr, "hunter2") || !strings.Contains(stderr, "--state-creds") {
		t.Fatalf("exit %d, stderr %q: want exit 2, pointing at --state-creds, without the password", code, stderr)
	}
}

// A small run through the CLI: exit 0, and the JSON report says every
// proposal was answered once. The report's shape is the point, not
// throughput: 100 proposals (10 of them invalid) show it.
func TestBenchJSON(t *testing.T) {
	parallelCLI(t)
	stdout, stderr, code := cli(t, "", "bench", "--proposals", "100", "--proposers", "2", "--json",
		"--policy", "../../examples/policies", "--data", "../../examples/policies/data.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Sent       int64            `json:"sent"`
		Unanswered int64            `json:"unanswered"`
		Duplicates int64            `json:"duplicates"`
		Outcomes   map[string]int64 `json:"outcomes"`
		Latency    struct {
			Count int `json:"count"`
		} `json:"latency"`
		PeakRSS  uint64 `json:"peak_rss_bytes"`
		State    string `json:"state"`
		StoreOps map[string]struct {
			Count int `json:"count"`
		} `json:"store_ops"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, stdout)
	}
	// Without --state the bench's fulfiller is run --state memory's: every
	// proposal is claimed in the store.
	if rep.State != "memory" || rep.StoreOps["claim"].Count != 100 {
		t.Errorf("state %q, store ops %+v: want memory and 100 claims", rep.State, rep.StoreOps)
	}
	var total int64
	for _, v := range rep.Outcomes {
		total += v
	}
	if rep.Sent != 100 || rep.Unanswered != 0 || rep.Duplicates != 0 || total != 100 || rep.Latency.Count != 100 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Outcomes["rejected:invalid"] != 10 {
		t.Errorf("rejected:invalid %d, want 10 (10%% of 100)", rep.Outcomes["rejected:invalid"])
	}
}

// The text report names the store and gives the fulfiller's own CPU per
// proposal, positive and below the whole process's.
func TestBenchTextFulfillerCPU(t *testing.T) {
	// No store: the CPU lines are the point, and a store's work would
	// only make the run (and CI) longer; TestBenchStateCompare has both.
	// 200 proposals: under -race a proposal costs 20-50 ms of CPU, so
	// the profile gets hundreds of 10 ms samples (about half of them on a
	// busy machine), the fulfiller about half; without -race a tenth, still
	// tens of samples for the fulfiller, which is all the lines below need.
	stdout, stderr, code := cli(t, "", "bench", "--proposals", "200", "--proposers", "2", "--state", "none",
		"--policy", "../../examples/policies", "--data", "../../examples/policies/data.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, ", state none, tool style jsonrpc\n") {
		t.Errorf("report does not say state none:\n%s", stdout)
	}
	m := regexp.MustCompile(`(?m)^fulfiller CPU per proposal: (\d+) µs \((\d+)% of process CPU\)$`).FindStringSubmatch(stdout)
	p := regexp.MustCompile(`(?m)^CPU +[0-9.]+s of the whole process, (\d+)µs per proposal$`).FindStringSubmatch(stdout)
	if m == nil || p == nil {
		t.Fatalf("no fulfiller or process CPU line:\n%s", stdout)
	}
	ful, _ := strconv.Atoi(m[1])
	share, _ := strconv.Atoi(m[2])
	proc, _ := strconv.Atoi(p[1])
	if ful <= 0 || ful >= proc || share <= 0 || share >= 100 {
		t.Errorf("fulfiller %dµs (%d%%), process %dµs per proposal: want 0 < fulfiller < process", ful, share, proc)
	}
}

// --state-compare runs memory then the durable store on the same load and
// reports both, each with every proposal answered once, and the ratio; the
// store's fresh directory is gone afterwards. One round: the median of
// several is internal/loadtest's TestCompareState. The output is the
// point, not the ratio: 50 proposals a run. --state-baseline none
// compares with no NATS store at all, against issue 28's 0.9×.
func TestBenchStateCompare(t *testing.T) {
	parallelCLI(t)
	for _, tc := range []struct {
		baseline string
		target   float64
	}{{"memory", 0.7}, {"none", 0.9}} {
		t.Run(tc.baseline, func(t *testing.T) { checkBenchStateCompare(t, tc.baseline, tc.target) })
	}
}

func checkBenchStateCompare(t *testing.T, baseline string, target float64) {
	dir := t.TempDir()
	stdout, stderr, code := cli(t, "", "bench", "--proposals", "50", "--proposers", "2", "--json",
		"--state", dir, "--state-compare", "--state-baseline", baseline, "--rounds", "1",
		"--policy", "../../examples/policies", "--data", "../../examples/policies/data.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	type report struct {
		State      string  `json:"state"`
		Sent       int64   `json:"sent"`
		Unanswered int64   `json:"unanswered"`
		Duplicates int64   `json:"duplicates"`
		Throughput float64 `json:"proposals_per_second"`
		Latency    struct {
			Count int     `json:"count"`
			P50   float64 `json:"p50_us"`
			P99   float64 `json:"p99_us"`
		} `json:"latency"`
	}
	var c struct {
		Rounds          int
		Baseline        string
		Memory, Durable []*report
		Ratio           float64 `json:"throughput_ratio"`
		Target          float64 `json:"throughput_ratio_target"`
	}
	if err := json.Unmarshal([]byte(stdout), &c); err != nil || c.Rounds != 1 || c.Baseline != baseline || len(c.Memory) != 1 || len(c.Durable) != 1 {
		t.Fatalf("not one JSON comparison of 1 round (%v):\n%s", err, stdout)
	}
	for i := range 1 {
		for _, r := range []*report{c.Memory[i], c.Durable[i]} {
			if r.Sent != 50 || r.Unanswered != 0 || r.Duplicates != 0 || r.Latency.Count != 50 || r.Latency.P50 <= 0 || r.Latency.P99 < r.Latency.P50 {
				t.Errorf("round %d: report %+v", i+1, *r)
			}
		}
		if c.Memory[i].State != baseline || c.Durable[i].State != dir {
			t.Errorf("round %d: states %q and %q, want %s and %q", i+1, c.Memory[i].State, c.Durable[i].State, baseline, dir)
		}
	}
	want := c.Durable[0].Throughput / c.Memory[0].Throughput
	if c.Ratio != want || c.Target != target {
		t.Errorf("ratio %v (want %v), target %v", c.Ratio, want, c.Target)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("left %v in --state %s (%v)", left, dir, err)
	}
}

// --tool-style compare runs the load against a tool owner that echoes
// JSON-RPC ids and one that answers as mew bridge does (no jsonrpc, no
// id), through two fulfilment slots: both answer every proposal once,
// with no fulfil timeout (each answer frees its slot) and no honest
// answer refused as a spoof attempt. The ratio is reported; whether it
// meets its target is the benchmark's business, not this test's.
func TestBenchToolStyleCompare(t *testing.T) {
	parallelCLI(t)
	stdout, stderr, code := cli(t, "", "bench", "--proposals", "200", "--proposers", "2", "--json", "--state", "none",
		"--max-inflight", "2", "--tool-style", "compare", "--rounds", "2",
		// What is compared is the tool owners' answers: a policy
		// evaluation slowed past run's 100ms by a loaded machine under
		// -race would be a fail-closed reject, not a difference of style.
		"--policy-timeout", "10s",
		"--policy", "../../examples/policies", "--data", "../../examples/policies/data.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	type report struct {
		ToolStyle      string           `json:"tool_style"`
		Sent           int64            `json:"sent"`
		Unanswered     int64            `json:"unanswered"`
		Duplicates     int64            `json:"duplicates"`
		FulfilTimeouts int64            `json:"fulfil_timeouts"`
		SpoofAttempts  int64            `json:"spoof_attempts"`
		Outcomes       map[string]int64 `json:"outcomes"`
		ToolRoundTrip  struct {
			Count int `json:"count"`
		} `json:"tool_round_trip"`
	}
	var c struct {
		Rounds       int
		JSONRPC, SDK []*report
		Ratio        float64 `json:"throughput_ratio"`
		Target       float64 `json:"throughput_ratio_target"`
	}
	if err := json.Unmarshal([]byte(stdout), &c); err != nil || c.Rounds != 2 || len(c.JSONRPC) != 2 || len(c.SDK) != 2 {
		t.Fatalf("not one JSON comparison of 2 rounds (%v):\n%s", err, stdout)
	}
	for i := range 2 {
		for style, r := range map[string]*report{"jsonrpc": c.JSONRPC[i], "sdk": c.SDK[i]} {
			if r.ToolStyle != style || r.Sent != 200 || r.Unanswered != 0 || r.Duplicates != 0 || r.FulfilTimeouts != 0 || r.SpoofAttempts != 0 ||
				r.Outcomes["fulfilled"] == 0 || r.Outcomes["rejected:timeout"] != 0 || r.ToolRoundTrip.Count != int(r.Outcomes["fulfilled"]) {
				t.Errorf("round %d, %s: report %+v", i+1, style, *r)
			}
		}
		if c.SDK[i].Outcomes["fulfilled"] != c.JSONRPC[i].Outcomes["fulfilled"] {
			t.Errorf("round %d: fulfilled: sdk %d, jsonrpc %d: the same load must be decided the same", i+1, c.SDK[i].Outcomes["fulfilled"], c.JSONRPC[i].Outcomes["fulfilled"])
		}
	}
	if c.Ratio <= 0 || c.Target != 0.9 {
		t.Errorf("ratio %v, target %v", c.Ratio, c.Target)
	}
}

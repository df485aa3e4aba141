package main

import (
	"encoding/json"
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
	} {
		_, stderr, code := cli(t, "", tc.args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %s", tc.args, code, stderr, tc.flag)
		}
	}
}

// A small run through the CLI: exit 0, and the JSON report says every
// proposal was answered once.
func TestBenchJSON(t *testing.T) {
	stdout, stderr, code := cli(t, "", "bench", "--proposals", "300", "--proposers", "2", "--json",
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
		PeakRSS uint64 `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, stdout)
	}
	var total int64
	for _, v := range rep.Outcomes {
		total += v
	}
	if rep.Sent != 300 || rep.Unanswered != 0 || rep.Duplicates != 0 || total != 300 || rep.Latency.Count != 300 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Outcomes["rejected:invalid"] != 30 {
		t.Errorf("rejected:invalid %d, want 30 (10%% of 300)", rep.Outcomes["rejected:invalid"])
	}
}

package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/poll"
)

// TestDemoServesMetrics runs `fulfiller demo --http ADDR --hold` and reads
// /metrics while it holds: the counters show the story's proposals, and
// that they went through the memory store. The operator API answers with
// the token the demo made and printed.
func TestDemoServesMetrics(t *testing.T) {
	t.Parallel() // a demo of its own on a port of its own, mostly waiting
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out lockedBuilder // the demo writes while the test reads
	root := newRootCmd()
	root.SetArgs([]string{"demo", "--color", "never", "--http", addr, "--hold"})
	root.SetOut(&out)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	metrics := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := []string{
		"fulfiller_proposals_received_total 14\n",
		`fulfiller_proposals_total{outcome="fulfilled",reason=""} 8` + "\n",
		`fulfiller_tasks_total{event="completed"} 1` + "\n",
		"fulfiller_tasks_running 0\n",
		`fulfiller_proposals_total{outcome="withdrawn",reason=""} 1` + "\n",
		`fulfiller_proposals_total{outcome="ignored",reason="duplicate"} 1` + "\n",
		`fulfiller_approver_answers_total{kind="accept"} 6` + "\n",
		`fulfiller_grants_total{event="created"} 1` + "\n",
		`fulfiller_grants_total{event="used"} 1` + "\n",
		"fulfiller_gateway_connected 1\n",
		// The demo's fulfiller is run --state memory's: every proposal it
		// received was claimed in the store, which the probe finds healthy.
		`fulfiller_state_claims_total{result="won"} 14` + "\n",
		"fulfiller_state_store_failing 0\n",
		// Every escalation's notifications reached the demo's webhook
		// receiver, which verified them: opened and ended for each of the
		// six, a reminder and an escalation for the payments change.
		`fulfiller_notifications_total{result="sent",target_kind="webhook"} 14` + "\n",
	}
	// The counters are read once the story has played (--hold says so):
	// /metrics asked every 2ms for the whole story was seconds of CPU
	// under -race, taken from the story and the tests beside it.
	poll.Until(t, "the end of the story", func() bool { return strings.Contains(out.String(), "holding the space open (--hold)") })
	poll.UntilServed(t, "the story's counters", func() bool {
		m := metrics()
		for _, w := range want {
			if !strings.Contains(m, w) {
				return false
			}
		}
		return true
	})
	// The operator API is closed without a token; the demo makes one and
	// prints the curl line that works.
	m := regexp.MustCompile(`Operator API token for this demo: (\S+)\n  curl -H 'Authorization: Bearer (\S+)' http://` + regexp.QuoteMeta(addr) + `/v1/proposals\n`).FindStringSubmatch(out.String())
	if m == nil || m[1] != m[2] || len(m[1]) < 26 {
		t.Fatalf("no usable token line in the narration:\n%s", out.String())
	}
	for tok, want := range map[string]int{"": 401, "wrong": 401, m[1]: 200} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/proposals", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("/v1/proposals with token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
	cancel() // the operator's Ctrl-C
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "15 of 15 proposals ended as the policy says.") {
		t.Fatalf("narration:\n%s", out.String())
	}
}

// lockedBuilder is a log sink one goroutine may write while another
// reads it.
type lockedBuilder = logbuf.Buffer

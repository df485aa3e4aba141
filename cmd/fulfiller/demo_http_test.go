package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDemoServesMetrics runs `fulfiller demo --http ADDR --hold` and reads
// /metrics while it holds: the counters show the story's proposals.
func TestDemoServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
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
		"fulfiller_proposals_received_total 9\n",
		`fulfiller_proposals_total{outcome="fulfilled",reason=""} 3` + "\n",
		`fulfiller_proposals_total{outcome="withdrawn",reason=""} 1` + "\n",
		`fulfiller_proposals_total{outcome="ignored",reason="duplicate"} 1` + "\n",
		`fulfiller_approver_answers_total{kind="accept"} 3` + "\n",
		"fulfiller_gateway_connected 1\n",
	}
	waitUntilTrue(t, "the story's counters", func() bool {
		m := metrics()
		for _, w := range want {
			if !strings.Contains(m, w) {
				return false
			}
		}
		return true
	})
	cancel() // the operator's Ctrl-C
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "10 of 10 proposals ended as the policy says.") {
		t.Fatalf("narration:\n%s", out.String())
	}
}

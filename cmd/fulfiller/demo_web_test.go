package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/spacetest"
)

// demo --web makes the person oncall-alice in the browser: the header
// prints the inbox's address, the production delete waits there, and an
// approval from the page lets the story finish with exit 0.
//
// The person approves every card but the one the proposer withdraws
// (step 9), as someone watching would: that step waits for both prompts
// to be cancelled, and an approval there would leave it waiting out the
// whole --step-timeout.
func TestDemoWebWaitsForTheBrowser(t *testing.T) {
	t.Parallel() // its own space and inbox; mostly waiting on the story
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"demo", "--web=127.0.0.1:0", "--color", "never", "--step-timeout", "20s"})
	var screen spacetest.Screen
	root.SetOut(&screen)
	root.SetErr(&screen)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	spacetest.WaitText(t, "the demo's header", screen.String, "answer the approval requests in your browser at")
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/\?token=[0-9a-f]+`).FindString(screen.String())
	if url == "" {
		t.Fatalf("no inbox address in the header:\n%s", screen.String())
	}
	base, _, _ := strings.Cut(url, "/?token=")
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	if resp, err := browser.Get(url); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", url, resp, err)
	}
	// Approve every prompt the page shows until the story ends, but the
	// withdrawn step's.
	const withdrawn = "demo-9-delete_path"
	answered := map[string]bool{}
	sawWithdrawn := false
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, screen.String())
			}
			if len(answered) == 0 {
				t.Fatal("the demo ended without asking the browser")
			}
			if !sawWithdrawn {
				t.Errorf("the browser never showed the card of %s, which the proposer withdraws", withdrawn)
			}
			if !strings.Contains(screen.String(), "fulfilled  deleted") {
				t.Errorf("the production delete was not fulfilled after the browser's approval:\n%s", screen.String())
			}
			return
		case <-ctx.Done():
			t.Fatalf("the demo did not end\n%s", screen.String())
		case <-time.After(200 * time.Millisecond):
		}
		for _, card := range openCards(ctx, browser, base) {
			id := card.ID
			if card.Proposal == withdrawn {
				sawWithdrawn = true
			}
			if answered[id] || card.Proposal == withdrawn {
				continue
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/answer", strings.NewReader(`{"id":"`+id+`","action":"approve"}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := browser.Do(req); err == nil {
				resp.Body.Close()
				answered[id] = resp.StatusCode == http.StatusAccepted
				t.Logf("%s answered %s: %s", time.Now().Format("15:04:05.000"), id, resp.Status)
			}
		}
	}
}

// card is what the test reads of one card in the page's feed.
type card struct{ ID, Proposal, State string }

// openCards reads the open cards from the page's feed.
func openCards(ctx context.Context, c *http.Client, base string) []card {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/events", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var snap struct{ Items []card }
			_ = json.Unmarshal([]byte(line), &snap)
			var open []card
			for _, it := range snap.Items {
				if it.State == "open" {
					open = append(open, it)
				}
			}
			return open
		}
	}
	return nil
}

// An interrupt while demo --web waits for the browser (main cancels the
// command's context on SIGINT) ends the demo cleanly: no error, a note,
// where it used to exit 1 with "context canceled".
func TestDemoWebInterruptedExitsCleanly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	root.SetArgs([]string{"demo", "--web=127.0.0.1:0", "--color", "never"})
	var screen spacetest.Screen
	root.SetOut(&screen)
	root.SetErr(&screen)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	spacetest.WaitText(t, "the story to reach the first card", screen.String, "writing outside production, which no rule allows")
	cancel()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(screen.String(), "fulfiller: demo stopped") {
			t.Fatalf("after the interrupt: %v\n%s", err, screen.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the demo did not stop within 30s of the interrupt:\n%s", screen.String())
	}
}

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
func TestDemoWebWaitsForTheBrowser(t *testing.T) {
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
	// Approve every prompt the page shows until the story ends.
	answered := map[string]bool{}
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, screen.String())
			}
			if len(answered) == 0 {
				t.Fatal("the demo ended without asking the browser")
			}
			if !strings.Contains(screen.String(), "fulfilled  deleted") {
				t.Errorf("the production delete was not fulfilled after the browser's approval:\n%s", screen.String())
			}
			return
		case <-ctx.Done():
			t.Fatalf("the demo did not end\n%s", screen.String())
		case <-time.After(200 * time.Millisecond):
		}
		for _, id := range openCards(ctx, browser, base) {
			if answered[id] {
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

// openCards reads the ids of the open cards from the page's feed.
func openCards(ctx context.Context, c *http.Client, base string) []string {
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
			var snap struct {
				Items []struct{ ID, State string }
			}
			_ = json.Unmarshal([]byte(line), &snap)
			var ids []string
			for _, it := range snap.Items {
				if it.State == "open" {
					ids = append(ids, it.ID)
				}
			}
			return ids
		}
	}
	return nil
}

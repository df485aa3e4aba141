package demo

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/approver"
)

func TestDemoStoryCompletes(t *testing.T) {
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := Run(ctx, Options{Out: &out}); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"└─ fulfilled  42 (",
		"chat to coder: no participant in the space offers tool \"list_users\"",
		"chat to mallory: proposals from mallory are not accepted here",
		"chat to coder: proposal payload has no method",
		"└─ ignored    proposal id seen before — no answer is sent",
		// Production delete: quorum 2, oncall-carol is away, both others approve.
		"├─ skipped    oncall-carol: not in the space",
		"├─ answered   oncall-alice approves: the migration is done; the old data can go",
		"├─ answered   oncall-bob approves: the migration is done; the old data can go",
		"└─ fulfilled  deleted 1 files under /srv/prod/db (",
		// Production write: bob declines, alice's open prompt is cancelled.
		"├─ answered   oncall-bob declines: production is frozen for the release; write to staging",
		"├─ cancelled  the prompt at oncall-alice (notifications/cancelled: disagree)",
		"chat to coder: oncall-bob declined: production is frozen for the release; write to staging",
		// Withdrawn while both are asked: both prompts are cancelled.
		"├─ withdrawn  by the proposer",
		"cancelled  the prompt at oncall-alice (notifications/cancelled: withdrawn)",
		"cancelled  the prompt at oncall-bob (notifications/cancelled: withdrawn)",
		" 6  coder     delete_path  withdrawn           ✓",
		"10 of 10 proposals ended as the policy says.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("narration lacks %q", want)
		}
	}
	if strings.Contains(text, "\033[") {
		t.Error("colour codes without Color")
	}
}

// TestDemoInteractive is `fulfiller demo --interactive` with the person's
// keystrokes scripted: they approve the production delete on the card;
// the other escalations end without them (declined by oncall-bob,
// withdrawn), and their cards are taken away.
func TestDemoInteractive(t *testing.T) {
	var out, screen syncBuffer
	keys, typing := io.Pipe()
	defer typing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(screen.String(), "a approve · d decline · c dismiss · q quit › ") && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		io.WriteString(typing, "a\n")
	}()
	err := Run(ctx, Options{Out: &out, Approver: &approver.Terminal{In: keys, Out: &screen}})
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"humans   you are oncall-alice: answer the approval cards below",
		"├─ answered   oncall-alice approves",
		"└─ fulfilled  deleted 1 files under /srv/prod/db (",
		" 4  coder     delete_path  fulfilled           ✓",
		"10 of 10 proposals ended as the policy says.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("narration lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{
		"▌ approval requested — demo-4-delete_path",
		"needs      2 approvals of oncall-alice, oncall-bob, oncall-carol",
		"✓ sent approved — demo-4-delete_path: coder → delete_path on fs",
		"✓ outcome demo-4-delete_path: coder → delete_path on fs — fulfilled: the call was sent to fs",
		"✗ ended demo-5-write_file: coder → write_file on fs — decided by another approver: not approved",
		"✗ ended demo-6-delete_path: coder → delete_path on fs — withdrawn by the proposer",
	} {
		if !strings.Contains(screen.String(), want) {
			t.Errorf("the approver's screen lacks %q:\n%s", want, screen.String())
		}
	}
	if strings.Contains(screen.String(), "in the space") {
		t.Errorf("the demo's in-process fulfiller joining is news on the card:\n%s", screen.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

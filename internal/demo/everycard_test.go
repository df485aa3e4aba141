package demo

import (
	"context"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// everyCard is a person in the browser inbox of demo --web: several cards
// open at once, each answered the same way as soon as it shows.
type everyCard struct {
	approve bool
	mu      sync.Mutex
	cards   []string
}

// Ask implements approver.UI.
func (u *everyCard) Ask(_ context.Context, c *approver.Card) (approver.Answer, error) {
	id := c.RequestID
	if c.Proposal != nil {
		id = c.Proposal.ID
	}
	u.mu.Lock()
	u.cards = append(u.cards, id)
	u.mu.Unlock()
	if u.approve {
		return approver.Answer{Action: approval.ActionAccept, Approve: true}, nil
	}
	return approver.Answer{Action: approval.ActionAccept, Reason: "not now"}, nil
}

// Notify implements approver.UI.
func (*everyCard) Notify(approver.Event) {}

// cardPrompt finds each card's header and the choice prompt after it.
var cardPrompt = regexp.MustCompile(`▌ approval requested — (\S+)`)

// answerEveryCard types keys into every card that shows its prompt on
// screen, once per card, until ctx ends. It returns the cards answered.
func answerEveryCard(ctx context.Context, screen *syncBuffer, typing io.Writer, keys string) <-chan []string {
	done := make(chan []string, 1)
	go func() {
		answered := map[string]bool{}
		var order []string
		defer func() { done <- order }()
		seen := -1
		for ; ctx.Err() == nil; time.Sleep(5 * time.Millisecond) {
			s := screen.String()
			// Four of these run at once under -race: the screen is
			// searched again only when something was written to it.
			if len(s) == seen {
				continue
			}
			seen = len(s)
			for _, m := range cardPrompt.FindAllStringSubmatchIndex(s, -1) {
				id := s[m[2]:m[3]]
				if answered[id] || !strings.Contains(s[m[1]:], "q quit › ") {
					continue
				}
				answered[id] = true
				order = append(order, id)
				_, _ = io.WriteString(typing, keys)
			}
		}
	}()
	return done
}

// An interactive demo ends as soon as the scripted one (give or take the
// moment the withdrawal waits for the person) whatever the person answers:
// answering every card, approve or decline. Approving the card of the
// proposal withdrawn in step 9 used to stall the demo to its step timeout
// (5 minutes with --interactive): it waited for two prompts to be
// cancelled, and the person had answered one (issue 42).
func TestDemoInteractiveAnswersEveryCard(t *testing.T) {
	t.Parallel() // mostly waiting
	timed := func(opts Options, limit time.Duration) (time.Duration, string, error) {
		var out syncBuffer
		opts.Out, opts.PolicyTimeout = &out, time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		start := time.Now()
		err := Run(ctx, opts)
		return time.Since(start), out.String(), err
	}
	// The scripted demo's run is the package's one (scriptedDemo), which
	// TestDemoStoryCompletes checks line by line.
	run := scriptedDemo()
	if run.err != nil {
		t.Fatalf("scripted demo: %v\n%s", run.err, run.text)
	}
	scripted := run.took
	t.Logf("scripted demo: %s", scripted.Round(10*time.Millisecond))
	// The four ways of answering run side by side: each is a demo of its
	// own (space, fulfiller, approvers), mostly waiting on the story's
	// pauses, and one after another they were most of the package's time.
	for _, c := range []struct {
		name, keys string
		step9      string // how step 9 ends in the summary
		answer     string // how the narration tells the person's answer
	}{
		{"approve", "a\n", "withdrawn", "answered   oncall-alice approves"},
		{"decline", "d\nnot now\n", "rejected:disagree", "answered   oncall-alice declines: not now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var screen syncBuffer
			keys, typing := io.Pipe()
			defer typing.Close()
			ctx, stop := context.WithCancel(context.Background())
			answered := answerEveryCard(ctx, &screen, typing, c.keys)
			// The person's pause at step 9 (3s) and their typing, with
			// room for a loaded machine; a stall is minutes.
			bound := 2*scripted + 30*time.Second
			// As demo --interactive: a step waits past the approval
			// deadline (5m), so a step that stalls shows in the time; the
			// run is stopped a little after the bound.
			took, text, err := timed(Options{Approver: &approver.Terminal{In: keys, Out: &screen}, Step: 5 * time.Minute}, bound+15*time.Second)
			stop()
			cards := <-answered
			t.Logf("interactive demo, %s every card (%d cards: %s): %s; scripted: %s", c.name, len(cards), strings.Join(cards, ", "),
				took.Round(10*time.Millisecond), scripted.Round(10*time.Millisecond))
			if took > bound {
				t.Errorf("the interactive demo took %s, the scripted one %s: more than %s", took, scripted, bound)
			}
			if err != nil {
				t.Fatalf("demo: %v\n%s\nthe approver's screen:\n%s", err, text, screen.String())
			}
			if !strings.Contains(strings.Join(cards, " "), "demo-9-delete_path") {
				t.Errorf("step 9's card was not answered; answered %v", cards)
			}
			checkStep9(t, text, c.answer, c.step9)
		})
		// As demo --web: the inbox shows several cards at once.
		t.Run(c.name+" in the browser", func(t *testing.T) {
			t.Parallel()
			ui := &everyCard{approve: c.name == "approve"}
			bound := 2*scripted + 30*time.Second
			took, text, err := timed(Options{Approver: ui, ApproverCards: 8, Step: 5 * time.Minute}, bound+15*time.Second)
			ui.mu.Lock()
			cards := ui.cards
			ui.mu.Unlock()
			t.Logf("interactive demo (as --web), %s every card (%d cards: %s): %s; scripted: %s", c.name, len(cards), strings.Join(cards, ", "),
				took.Round(10*time.Millisecond), scripted.Round(10*time.Millisecond))
			if took > bound {
				t.Errorf("the interactive demo took %s, the scripted one %s: more than %s", took, scripted, bound)
			}
			if err != nil {
				t.Fatalf("demo: %v\n%s", err, text)
			}
			checkStep9(t, text, strings.TrimSuffix(c.answer, ": not now"), c.step9)
		})
	}
}

// checkStep9 checks how step 9 and the story ended.
func checkStep9(t *testing.T, text, answer, outcome string) {
	t.Helper()
	i := strings.Index(text, "\n 9 ")
	j := strings.Index(text, "\n10 ")
	if i < 0 || j < i {
		t.Fatalf("no step 9 in:\n%s", text)
	}
	step9 := text[i:j]
	for _, want := range []string{answer, "cancelled  the prompt at oncall-bob"} {
		if !strings.Contains(step9, want) {
			t.Errorf("step 9 lacks %q:\n%s", want, step9)
		}
	}
	for _, want := range []string{
		" 9  coder     delete_path  " + outcome,
		"15 of 15 proposals ended as the policy says.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("narration lacks %q:\n%s", want, text)
		}
	}
}

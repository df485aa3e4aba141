//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// TestDemoInteractiveInTmux runs the built binary's `demo --interactive` in
// a real terminal (tmux), reads the screen as a person would see it, and
// approves the production delete with one key press. It needs tmux (CI has
// TestApproveOnPTY instead, which needs nothing but a pty).
func TestDemoInteractiveInTmux(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testenv.Missing(t, "tmux is not installed (apt-get install -y tmux)")
	}
	bin := fulfillerBinary(t)
	// Unique per test process: TempDir's base name ("001") is the same in
	// every concurrent `go test`, and a shared tmux server fails the second
	// run with "duplicate session".
	socket := "fulfiller-test-" + strconv.Itoa(os.Getpid()) + "-" + filepath.Base(t.TempDir())
	run := func(args ...string) string {
		out, err := exec.Command(tmux, append([]string{"-L", socket}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// The shell keeps the pane open after the demo ends, so the summary
	// can be read.
	run("new-session", "-d", "-s", "demo", "-x", "160", "-y", "50", "NO_COLOR=1 '"+bin+"' demo --interactive; sleep 60")
	t.Cleanup(func() { _ = exec.Command(tmux, "-L", socket, "kill-server").Run() })
	screen := func() string { return run("capture-pane", "-t", "demo", "-p", "-S", "-300") }
	waitScreen := func(what, text string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(screen(), text) {
			if time.Now().After(deadline) {
				t.Fatalf("the screen never showed %s (%q):\n%s", what, text, screen())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitScreen("the card", "▌ approval requested — demo-4-delete_path")
	waitScreen("the prompt", "left] a approve · d decline · c dismiss · q quit ›")
	for _, want := range []string{"proposer   coder", "tool       delete_path — Delete a file or a whole directory tree", `"path": "/srv/prod/db"`, "needs      2 approvals of oncall-alice, oncall-bob, oncall-carol"} {
		if !strings.Contains(screen(), want) {
			t.Errorf("card lacks %q", want)
		}
	}
	run("send-keys", "-t", "demo", "a")
	waitScreen("the answer", "✓ sent approved — demo-4-delete_path: coder → delete_path on fs")
	// The first production log read: approve it and allow such reads for
	// 1h (l, then the second duration); the next read needs nobody.
	waitScreen("the log card", "▌ approval requested — demo-6-read_file")
	waitScreen("the grant on offer", "grantable  allow anyone who may propose in this space → read_file, path under /srv/prod/logs/ for 15m, 1h, 8h")
	run("send-keys", "-t", "demo", "l")
	waitScreen("the durations", "how long (number or duration, Enter to go back):")
	run("send-keys", "-t", "demo", "2", "Enter")
	waitScreen("the grant sent", "✓ sent approved, and calls like it for 1h — demo-6-read_file: coder → read_file on fs")
	// After the operator revokes the grant, the next read is asked again.
	waitScreen("the card after the revoke", "▌ approval requested — demo-8-read_file")
	deadline := time.Now().Add(20 * time.Second)
	for s := screen(); !strings.Contains(s[strings.LastIndex(s, "▌ approval requested — demo-8-read_file"):], "g delegate · c dismiss · q quit ›"); s = screen() {
		if time.Now().After(deadline) {
			t.Fatalf("the screen never showed demo-8's prompt:\n%s", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run("send-keys", "-t", "demo", "a")
	waitScreen("the end of the story", "15 of 15 proposals ended as the policy says.")
	if s := screen(); !strings.Contains(s, "└─ fulfilled  deleted 1 files under /srv/prod/db") || !strings.Contains(s, "✗ ended demo-9-delete_path: coder → delete_path on fs — withdrawn by the proposer") ||
		strings.Contains(s, "▌ approval requested — demo-7-read_file") {
		t.Errorf("screen:\n%s", s)
	}
}

// At the first card, q or ctrl-C ends the interactive demo at once and
// cleanly (exit 0, a one-line note): before, ctrl-C left it waiting for
// the proposal's outcome and q was ignored.
func TestDemoInteractiveQuitsAtTheCard(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testenv.Missing(t, "tmux is not installed (apt-get install -y tmux)")
	}
	bin := fulfillerBinary(t)
	for name, key := range map[string]string{"q": "q", "ctrl-C": "C-c"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			socket := "fulfiller-test-" + strconv.Itoa(os.Getpid()) + "-quit-" + strings.ReplaceAll(name, "-", "")
			run := func(args ...string) string {
				out, err := exec.Command(tmux, append([]string{"-L", socket}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("tmux %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			run("new-session", "-d", "-s", "demo", "-x", "160", "-y", "50", "NO_COLOR=1 '"+bin+"' demo --interactive; echo \"exit=$?\"; sleep 60")
			t.Cleanup(func() { _ = exec.Command(tmux, "-L", socket, "kill-server").Run() })
			screen := func() string { return run("capture-pane", "-t", "demo", "-p", "-S", "-300") }
			waitScreen := func(what, text string, within time.Duration) {
				t.Helper()
				deadline := time.Now().Add(within)
				for !strings.Contains(screen(), text) {
					if time.Now().After(deadline) {
						t.Fatalf("the screen never showed %s (%q):\n%s", what, text, screen())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			waitScreen("the prompt", "left] a approve · d decline · c dismiss · q quit ›", 20*time.Second)
			run("send-keys", "-t", "demo", key)
			waitScreen("the exit", "exit=0", 10*time.Second)
			s := screen()
			if !strings.Contains(s, "fulfiller: demo stopped") || strings.Contains(s, "context canceled") || strings.Contains(s, " 5 writing to production") {
				t.Errorf("after %s at the first card:\n%s", name, s)
			}
		})
	}
}

// TestDemoInteractiveEveryCardInTmux answers every card of `demo
// --interactive` in a real terminal, once approving them all and once
// declining them all, and checks that the story ends about as fast as the
// scripted demo: before, approving the card of the proposal withdrawn in
// step 9 left the demo waiting 5 minutes for a cancellation that could
// not come (issue 42). Both times are in the test log.
func TestDemoInteractiveEveryCardInTmux(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testenv.Missing(t, "tmux is not installed (apt-get install -y tmux)")
	}
	bin := fulfillerBinary(t)
	start := time.Now()
	if out, err := exec.Command(bin, "demo", "--color", "never").CombinedOutput(); err != nil {
		t.Fatalf("scripted demo: %v\n%s", err, out)
	}
	scripted := time.Since(start)
	t.Logf("scripted demo: %s", scripted.Round(10*time.Millisecond))
	// The person's pause at step 9 (3s) and key presses, with room for a
	// loaded machine; a stall is minutes.
	bound := 2*scripted + 30*time.Second
	for _, way := range []string{"approve", "decline"} {
		t.Run(way, func(t *testing.T) {
			t.Parallel() // a tmux server and a demo of its own, mostly waiting
			socket := "fulfiller-test-" + strconv.Itoa(os.Getpid()) + "-every-" + way
			run := func(args ...string) string {
				out, err := exec.Command(tmux, append([]string{"-L", socket}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("tmux %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			start := time.Now()
			run("new-session", "-d", "-s", "demo", "-x", "160", "-y", "50", "NO_COLOR=1 '"+bin+"' demo --interactive; echo \"exit=$?\"; sleep 60")
			t.Cleanup(func() { _ = exec.Command(tmux, "-L", socket, "kill-server").Run() })
			screen := func() string { return run("capture-pane", "-t", "demo", "-p", "-S", "-") }
			answered := map[string]bool{}
			var cards []string
			for {
				s := screen()
				if strings.Contains(s, "exit=") {
					break
				}
				if time.Since(start) > bound {
					t.Fatalf("the interactive demo (%s every card: %s) had not ended after %s; the scripted one took %s:\n%s", way, strings.Join(cards, ", "), bound, scripted, s)
				}
				for _, m := range tmuxCard.FindAllStringSubmatchIndex(s, -1) {
					id := s[m[2]:m[3]]
					if answered[id] || !strings.Contains(s[m[1]:], "q quit ›") {
						continue
					}
					answered[id] = true
					cards = append(cards, id)
					if way == "approve" {
						run("send-keys", "-t", "demo", "a")
						continue
					}
					run("send-keys", "-t", "demo", "d")
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
						s := screen()
						if i := strings.LastIndex(s, "▌ approval requested — "+id); i >= 0 && strings.Contains(s[i:], "reason, sent to the proposer (optional):") {
							break
						}
						if strings.Contains(s[strings.LastIndex(s, "▌ approval requested — "+id):], "✗ ended") || time.Now().After(deadline) {
							break // the card went away before the reason was asked
						}
					}
					run("send-keys", "-t", "demo", "-l", "not now")
					run("send-keys", "-t", "demo", "Enter")
				}
				time.Sleep(50 * time.Millisecond)
			}
			took := time.Since(start)
			t.Logf("interactive demo, %s every card (%s): %s; scripted: %s", way, strings.Join(cards, ", "), took.Round(10*time.Millisecond), scripted.Round(10*time.Millisecond))
			s := screen()
			if !strings.Contains(s, "exit=0") || !strings.Contains(s, "15 of 15 proposals ended as the policy says.") {
				t.Errorf("the demo did not end well:\n%s", s)
			}
			if !answered["demo-9-delete_path"] {
				t.Errorf("step 9's card was not answered: %v", cards)
			}
		})
	}
}

// tmuxCard finds the cards on a screen of `demo --interactive`.
var tmuxCard = regexp.MustCompile(`▌ approval requested — (\S+)`)

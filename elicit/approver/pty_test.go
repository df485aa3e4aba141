//go:build unix

package approver_test

import (
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"

	"github.com/creack/pty"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// TestTerminalPTY runs the card UI on a real pseudo-terminal: the card
// renders, the countdown runs, and a single key press (raw mode, no Enter)
// approves.
func TestTerminalPTY(t *testing.T) {
	t.Parallel()
	master, slave, err := pty.Open()
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal here: %v", err)
	}
	// Pollable copies, so that closing them ends the reads blocked on them
	// and no goroutine outlives the test.
	ptmx, tty := pollable(t, master), pollable(t, slave)
	w := newWorld(t, oneApprover, nil)
	t.Cleanup(func() { tty.Close(); ptmx.Close() })
	var screenText screen
	go func() { _, _ = io.Copy(&screenText, ptmx) }()

	ui := approver.NewTerminal(tty, tty, true)
	if ui.Raw == nil {
		t.Fatal("NewTerminal did not see a terminal")
	}
	w.approver("alice", ui, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card on the terminal", screenText.String, "\x1b[1m▌ approval requested — p-write")
	waitFor(t, "the prompt with its countdown", screenText.String, " left] \x1b[0ma approve · e edit · d decline · c dismiss · q quit › ")
	if _, err := ptmx.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(t, "the confirmation", screenText.String, "✓ sent\x1b[0m approved — p-write: coder → write_file on fs")
	if c, _ := w.files.Read("/srv/prod/motd"); c != "hi" {
		t.Errorf("file holds %q", c)
	}
}

// ptyUI starts alice's client on a pseudo-terminal cols columns wide and
// returns the terminal's master side and what it shows, as bytes.
func ptyUI(t *testing.T, w *world, cols uint16, tune func(*approver.Terminal)) (*os.File, *screen) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal here: %v", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 24, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	ptmx, tty := pollable(t, master), pollable(t, slave)
	t.Cleanup(func() { tty.Close(); ptmx.Close() })
	out := &screen{}
	go func() { _, _ = io.Copy(out, ptmx) }()
	ui := approver.NewTerminal(tty, tty, false)
	if ui.Raw == nil || ui.Size == nil {
		t.Fatal("NewTerminal did not see a terminal")
	}
	if tune != nil {
		tune(ui)
	}
	w.approver("alice", ui, approver.Options{})
	return ptmx, out
}

// The reason is edited on the terminal: typing abcd, Left-arrow, Q shows
// abcQd, and exactly that — no escape sequence — is sent in the answer
// and reaches the proposer's chat.
func TestTerminalPTYReasonLineEditing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	ptmx, out := ptyUI(t, w, 80, nil)
	id := w.propose("p-write")
	waitFor(t, "the prompt", out.String, "a approve · e edit · d decline · c dismiss · q quit › ")
	if _, err := ptmx.Write([]byte("d")); err != nil {
		t.Fatal(err)
	}
	const prompt = "  reason, sent to the proposer (optional): "
	waitFor(t, "the reason prompt", out.String, prompt)
	if _, err := ptmx.Write([]byte("abcd\x1b[DQ\r")); err != nil { // Left-arrow is ESC [ D
		t.Fatal(err)
	}
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	if chat := w.chat(id); chat != "alice declined: abcQd" {
		t.Errorf("the proposer's chat says %q, want %q", chat, "alice declined: abcQd")
	}
	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	var resp struct {
		Result struct {
			Action  string `json:"action"`
			Content struct {
				Approve *bool  `json:"approve"`
				Reason  string `json:"reason"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(ans.Payload, &resp); err != nil {
		t.Fatal(err)
	}
	if r := resp.Result; r.Action != "accept" || r.Content.Approve == nil || *r.Content.Approve || r.Content.Reason != "abcQd" {
		t.Errorf("answer %s, want accept with approve false and reason abcQd", ans.Payload)
	}
	waitFor(t, "the confirmation", out.String, "✓ sent declined: abcQd")
	var shown []string
	for _, l := range screenOf(out.String(), 80) {
		if rest, ok := strings.CutPrefix(l, prompt); ok {
			shown = append(shown, rest)
		}
	}
	if len(shown) != 1 || shown[0] != "abcQd" {
		t.Errorf("the screen shows the reason as %q, want once as %q", shown, "abcQd")
	}
}

// At 40 columns the choice line with its countdown fits, so each redraw
// replaces it: one countdown line on the screen, however often it ticks.
func TestTerminalPTYNarrowCountdown(t *testing.T) {
	t.Parallel()
	w := newWorld(t, oneApprover, nil)
	ptmx, out := ptyUI(t, w, 40, func(ui *approver.Terminal) { ui.Tick = 10 * time.Millisecond })
	id := w.propose("p-write")
	poll.Until(t, "20 redraws of the countdown", func() bool { return strings.Count(out.String(), "\r\x1b[K[") >= 20 })
	var countdown []string
	for _, l := range screenOf(out.String(), 40) {
		if strings.Contains(l, " left]") {
			countdown = append(countdown, l)
		}
	}
	if len(countdown) != 1 || !regexp.MustCompile(`^\[[0-9]m[0-9]{2}s left\] a/e/d/c/q ›$`).MatchString(countdown[0]) {
		t.Errorf("countdown lines on a 40-column screen: %q, want one that fits", countdown)
	}
	if _, err := ptmx.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	waitFor(t, "the outcome", out.String, "✓ outcome p-write: coder → write_file on fs — fulfilled: the call was sent to fs")
}

// pollable returns a non-blocking duplicate of f that Go's poller serves,
// and closes f.
func pollable(t *testing.T, f *os.File) *os.File {
	t.Helper()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := syscall.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}

//go:build unix

package approver_test

import (
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/creack/pty"

	"github.com/mewkit/fulfiller/approver"
)

// TestTerminalPTY runs the card UI on a real pseudo-terminal: the card
// renders, the countdown runs, and a single key press (raw mode, no Enter)
// approves.
func TestTerminalPTY(t *testing.T) {
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
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

package approver

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/mewkit/fulfiller/elicit"
)

// Terminal is the interactive UI: it prints each card and reads the
// person's choice as one key press (a approve, e edit then approve,
// d decline, g delegate, c dismiss, q quit), with a live countdown to the
// deadline while it waits. On a terminal the choice is read in raw mode;
// elsewhere (a pipe, a test) a line is read and its first letter counts.
// Free text — a reason, an edited value — is always read as a line.
type Terminal struct {
	In  io.Reader
	Out io.Writer
	// Raw switches the terminal to raw mode and returns how to switch it
	// back; nil reads the choice as a line. NewTerminal sets it for a tty.
	Raw func() (restore func(), err error)
	// Flush discards typed-ahead input still queued in the terminal; nil
	// does nothing. NewTerminal sets it for a tty.
	Flush func()
	Color bool
	Tick  time.Duration    // countdown refresh in raw mode [1s]
	Now   func() time.Time // [time.Now]

	once   sync.Once
	keys   chan byte // bytes from In; closed at EOF
	skipLF bool      // the last line ended with \r: a \n right after it is part of it

	mu       sync.Mutex // serialises output
	onScreen string     // the raw-mode prompt on screen now, "" when none
	above    []byte     // text written with Write that does not end a line yet
}

// NewTerminal makes a Terminal on in and out, in raw-key mode when in is a
// terminal.
func NewTerminal(in *os.File, out io.Writer, color bool) *Terminal {
	t := &Terminal{In: in, Out: out, Color: color}
	// SyscallConn, not Fd: Fd would switch a pollable file to blocking
	// mode, and a blocked read could then not be ended by Close.
	fd := -1
	if rc, err := in.SyscallConn(); err == nil {
		_ = rc.Control(func(f uintptr) { fd = int(f) })
	}
	if fd >= 0 && term.IsTerminal(fd) {
		t.Raw = func() (func(), error) {
			st, err := term.MakeRaw(fd)
			if err != nil {
				return nil, err
			}
			return func() { _ = term.Restore(fd, st) }, nil
		}
		t.Flush = func() { flushInput(fd) }
	}
	return t
}

func (t *Terminal) start() {
	t.once.Do(func() {
		t.keys = make(chan byte, 256)
		go func() {
			defer close(t.keys)
			buf := make([]byte, 256)
			for {
				n, err := t.In.Read(buf)
				for _, b := range buf[:n] {
					t.keys <- b
				}
				if err != nil {
					return
				}
			}
		}()
	})
}

func (t *Terminal) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Terminal) print(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = io.WriteString(t.Out, s)
}

// showPrompt draws the raw-mode prompt line ("" clears it from memory when
// raw mode ends).
func (t *Terminal) showPrompt(p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onScreen = p
	if p != "" {
		_, _ = io.WriteString(t.Out, "\r\033[K"+p)
	}
}

// Write prints other output — the demo's narration — on the same terminal
// without garbling a card: whole lines go above the prompt line, which is
// then drawn again. It makes a Terminal usable as an io.Writer.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.above = append(t.above, p...)
	i := bytes.LastIndexByte(t.above, '\n')
	if i < 0 {
		return len(p), nil
	}
	text := string(t.above[:i+1])
	t.above = append(t.above[:0], t.above[i+1:]...)
	if t.onScreen != "" {
		// Raw mode: no newline translation, and the prompt is on screen.
		text = "\r\033[K" + strings.ReplaceAll(text, "\n", "\r\n") + t.onScreen
	}
	_, err := io.WriteString(t.Out, text)
	return len(p), err
}

// drain discards keys typed before a card was shown: a key pressed for the
// previous card must never answer the next one.
func (t *Terminal) drain() {
	if t.Flush != nil {
		t.Flush()
	}
	for {
		select {
		case _, ok := <-t.keys:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// Ask implements UI.
func (t *Terminal) Ask(ctx context.Context, c *Card) (Answer, error) {
	t.start()
	t.drain()
	var b strings.Builder
	c.Render(&b, t.now(), t.Color)
	t.print(b.String())
	for {
		k, err := t.choice(ctx, c)
		if err != nil {
			return Answer{}, err
		}
		switch k {
		case 'a', 'y':
			return Answer{Action: elicit.ActionAccept, Approve: true}, nil
		case 'e':
			if len(c.Fields) == 0 {
				t.print("  nothing on this card is editable\n")
				continue
			}
			edits, err := t.edit(ctx, c)
			if err != nil {
				return Answer{}, err
			}
			reason, err := t.line(ctx, "  reason (optional): ")
			if err != nil {
				return Answer{}, err
			}
			return Answer{Action: elicit.ActionAccept, Approve: true, Reason: strings.TrimSpace(reason), Edits: edits}, nil
		case 'd', 'n':
			reason, err := t.line(ctx, "  reason, sent to the proposer (optional): ")
			if err != nil {
				return Answer{}, err
			}
			if reason = strings.TrimSpace(reason); reason == "" {
				return Answer{Action: elicit.ActionDecline}, nil
			}
			return Answer{Action: elicit.ActionAccept, Reason: reason}, nil
		case 'g':
			if len(c.Delegates) == 0 {
				t.print("  nobody to hand this to\n")
				continue
			}
			to, err := t.delegate(ctx, c)
			if err != nil {
				return Answer{}, err
			}
			if to == "" {
				continue
			}
			return Answer{Action: elicit.ActionAccept, DelegateTo: to}, nil
		case 'c':
			return Answer{Action: elicit.ActionCancel}, nil
		case 'q', 3, 4: // q, ctrl-C, ctrl-D
			return Answer{}, ErrQuit
		default:
			t.print("  a approve as shown · e change the editable arguments, then approve · d decline · g hand to another approver · c dismiss without deciding · q quit\n")
		}
	}
}

// prompt is the choice line with the time left.
func (t *Terminal) prompt(c *Card) string {
	var b strings.Builder
	if dl := c.Deadline(); !dl.IsZero() {
		left := "[" + Countdown(dl, t.now()) + " left] "
		b.WriteString(style(t.Color).yellow(left))
	}
	b.WriteString("a approve")
	if len(c.Fields) > 0 {
		b.WriteString(" · e edit")
	}
	b.WriteString(" · d decline")
	if len(c.Delegates) > 0 {
		b.WriteString(" · g delegate")
	}
	b.WriteString(" · c dismiss · q quit › ")
	return b.String()
}

// choice reads one key.
func (t *Terminal) choice(ctx context.Context, c *Card) (byte, error) {
	if t.Raw != nil {
		if restore, err := t.Raw(); err == nil {
			defer restore()
			// Keys typed before the prompt (half a line from a card that
			// went away) must not choose for this one.
			t.drain()
			return t.rawKey(ctx, c)
		}
	}
	t.print(t.prompt(c))
	line, err := t.readLine(ctx)
	if err != nil {
		return 0, err
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return '?', nil
	}
	return lower(line[0]), nil
}

// rawKey waits for one key in raw mode, redrawing the countdown.
func (t *Terminal) rawKey(ctx context.Context, c *Card) (byte, error) {
	t.showPrompt(t.prompt(c))
	defer t.showPrompt("")
	tick := time.NewTicker(max(t.Tick, 10*time.Millisecond))
	if t.Tick == 0 {
		tick.Reset(time.Second)
	}
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.print("\r\n")
			return 0, ctx.Err()
		case <-tick.C:
			t.showPrompt(t.prompt(c))
		case b, ok := <-t.keys:
			switch {
			case !ok:
				t.print("\r\n")
				return 0, ErrQuit
			case b == '\r' || b == '\n' || b == ' ':
				continue
			case b < ' ':
				t.print("\r\n")
				return b, nil
			}
			t.print(string(rune(b)) + "\r\n")
			return lower(b), nil
		}
	}
}

// readLine reads up to the end of a line.
func (t *Terminal) readLine(ctx context.Context) (string, error) {
	var b []byte
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case k, ok := <-t.keys:
			if !ok {
				if len(b) > 0 {
					return string(b), nil
				}
				return "", ErrQuit
			}
			if k == '\n' && t.skipLF && len(b) == 0 {
				t.skipLF = false
				continue
			}
			t.skipLF = false
			switch k {
			case '\r':
				t.skipLF = true
				return string(b), nil
			case '\n':
				return string(b), nil
			}
			b = append(b, k)
		}
	}
}

func (t *Terminal) line(ctx context.Context, prompt string) (string, error) {
	t.print(prompt)
	return t.readLine(ctx)
}

// edit asks for each editable field; Enter keeps the proposed value.
func (t *Terminal) edit(ctx context.Context, c *Card) ([]Edit, error) {
	var edits []Edit
	for _, f := range c.Fields {
		label := f.Name + " (" + f.Type
		if len(f.Enum) > 0 {
			label += ": " + strings.Join(f.Enum, "|")
		}
		label += ")"
		for {
			text, err := t.line(ctx, fmt.Sprintf("  %s [%s]: ", label, display(f.Default)))
			if err != nil {
				return nil, err
			}
			if strings.TrimSpace(text) == "" {
				break
			}
			v, err := ParseValue(f, text)
			if err != nil {
				t.print("  " + err.Error() + "\n")
				continue
			}
			if !sameValue(v, f.Default) {
				edits = append(edits, Edit{Name: f.Name, Value: v})
			}
			break
		}
	}
	return edits, nil
}

// delegate asks whom to hand the card to; "" goes back to the choice.
func (t *Terminal) delegate(ctx context.Context, c *Card) (string, error) {
	for i, d := range c.Delegates {
		t.print(fmt.Sprintf("  %d) %s\n", i+1, d))
	}
	text, err := t.line(ctx, "  hand to (number or name, Enter to go back): ")
	if err != nil {
		return "", err
	}
	text = strings.TrimSpace(text)
	if n, err := strconv.Atoi(text); err == nil && n >= 1 && n <= len(c.Delegates) {
		return c.Delegates[n-1], nil
	}
	for _, d := range c.Delegates {
		if d == text {
			return d, nil
		}
	}
	if text != "" {
		t.print("  " + text + " is not one of them\n")
	}
	return "", nil
}

// Dropped implements UI.
func (t *Terminal) Dropped(c *Card, reason string) {
	t.print(fmt.Sprintf("%s %s — %s\n", style(t.Color).red("✗ withdrawn"), c.Summary(), DroppedReason(reason)))
}

// Sent implements UI.
func (t *Terminal) Sent(c *Card, a Answer, err error) {
	if err != nil {
		t.print(fmt.Sprintf("%s %s: %v\n", style(t.Color).red("✗ not sent"), c.Summary(), err))
		return
	}
	t.print(fmt.Sprintf("%s %s — %s\n", style(t.Color).green("✓ sent"), a.Describe(), c.Summary()))
}

func lower(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// display shows a default value: strings without quotes.
func display(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

func sameValue(a, b json.RawMessage) bool {
	if b == nil {
		return false
	}
	x, errX := elicit.Canonical(a)
	y, errY := elicit.Canonical(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

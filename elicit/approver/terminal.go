package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/printable"
)

// Terminal is the interactive UI: it prints each card and reads the
// person's choice as one key press (a approve, e edit then approve,
// l approve and grant, d decline, g delegate, c dismiss, q quit — only
// those the card offers),
// with a live countdown to the deadline while it waits. On a terminal the
// whole card is answered in raw mode: the choice is one key, and free
// text — a reason, an edited value — is read with line editing
// (golang.org/x/term), so arrow keys move the cursor and what is sent is
// exactly what the screen shows. Elsewhere (a pipe, a test) lines are
// read and a choice's first letter counts. Control characters never leave
// the client.
type Terminal struct {
	In  io.Reader
	Out io.Writer
	// Raw switches the terminal to raw mode and returns how to switch it
	// back; nil reads the choice as a line. NewTerminal sets it for a tty.
	Raw func() (restore func(), err error)
	// Flush discards typed-ahead input still queued in the terminal; nil
	// does nothing. NewTerminal sets it for a tty.
	Flush func()
	// Size returns the terminal's width and height; nil or an error means
	// unknown. NewTerminal sets it for a tty. The countdown line is kept
	// within the width: a line that wraps cannot be redrawn in place.
	Size  func() (width, height int, err error)
	Color bool
	Tick  time.Duration    // countdown refresh in raw mode [1s]
	Now   func() time.Time // [time.Now]

	once   sync.Once
	keys   chan byte // bytes from In; closed at EOF
	skipLF bool      // the last line ended with \r: a \n right after it is part of it

	mu       sync.Mutex     // serialises output
	raw      bool           // the terminal is in raw mode: \n does not return the carriage
	onScreen string         // the raw-mode choice line on screen now, "" when none
	midLine  bool           // line mode: a prompt waits for its line; output starts a new one
	editor   *term.Terminal // the line being edited in raw mode, nil when none
	above    []byte         // text written with Write that does not end a line yet
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
		t.Size = func() (int, int, error) { return term.GetSize(fd) }
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

// size is the terminal's width and height; 0, 0 when unknown.
func (t *Terminal) size() (width, height int) {
	if t.Size == nil {
		return 0, 0
	}
	w, h, err := t.Size()
	if err != nil || w <= 0 {
		return 0, 0
	}
	return w, h
}

func (t *Terminal) setRaw(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.raw = on
}

func (t *Terminal) isRaw() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.raw
}

// say prints text — whole lines, or a line-mode prompt — above whatever
// prompt is live (the choice line with its countdown, or the line being
// edited) and draws that prompt again. Everything but the prompts goes
// through say, so that nothing garbles them.
func (t *Terminal) say(text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sayLocked(text)
}

func (t *Terminal) sayLocked(text string) {
	switch {
	case t.editor != nil:
		// It moves the edited line out of the way and draws it again.
		_, _ = t.editor.Write([]byte(text))
	case t.onScreen != "":
		_, _ = io.WriteString(t.Out, "\r\033[K"+crlf(text)+t.onScreen)
	case t.raw:
		_, _ = io.WriteString(t.Out, crlf(text))
	default:
		if t.midLine && text != "" {
			text = "\n" + text
		}
		t.midLine = !strings.HasSuffix(text, "\n")
		if t.Raw != nil {
			// A terminal may still be in raw mode while a card's end
			// switches it back: \r\n shows the same in either mode, \n
			// alone would staircase the narration.
			text = crlf(text)
		}
		_, _ = io.WriteString(t.Out, text)
	}
}

// lineRead notes that a line was read in line mode: the person's Enter
// ended the prompt's line.
func (t *Terminal) lineRead() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.midLine = false
}

// crlf ends lines with \r\n: in raw mode \n alone does not return the
// carriage.
func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

// showPrompt draws the raw-mode choice line in place of the one on screen.
func (t *Terminal) showPrompt(p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onScreen = p
	_, _ = io.WriteString(t.Out, "\r\033[K"+p)
}

// endPrompt leaves the choice line on screen, followed by echo, and moves
// to the next line.
func (t *Terminal) endPrompt(echo string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onScreen = ""
	_, _ = io.WriteString(t.Out, echo+"\r\n")
}

// Write prints other output — the demo's narration — on the same terminal
// without garbling a card: whole lines go above the live prompt, which is
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
	t.sayLocked(text)
	return len(p), nil
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

// action is one thing a card offers, chosen by key.
type action struct {
	key         byte
	name, usage string
}

// actions are what card c offers, in the order the prompt lists them. A
// card whose digest does not match the call shown cannot be approved, so
// it does not offer it.
func actions(c *Card) []action {
	var acts []action
	if c.Proposal == nil || c.DigestOK {
		acts = append(acts, action{'a', "approve", "approve as shown"})
		if c.Grant != nil {
			acts = append(acts, action{'l', "allow", "approve, and allow calls like this for a while"})
		}
		if len(c.Fields) > 0 {
			acts = append(acts, action{'e', "edit", "change the editable arguments, then approve"})
		}
	}
	acts = append(acts, action{'d', "decline", "decline, with a reason for the proposer"})
	if len(c.Delegates) > 0 {
		acts = append(acts, action{'g', "delegate", "hand to another approver"})
	}
	return append(acts, action{'c', "dismiss", "dismiss without deciding"}, action{'q', "quit", "quit"})
}

// offered returns the action key k chooses (y and n stand for a and d),
// or false.
func offered(acts []action, k byte) (byte, bool) {
	switch k {
	case 'y':
		k = 'a'
	case 'n':
		k = 'd'
	}
	for _, a := range acts {
		if a.key == k {
			return k, true
		}
	}
	return 0, false
}

// help lists the actions the card offers, one line.
func help(acts []action) string {
	parts := make([]string, len(acts))
	for i, a := range acts {
		parts[i] = string(a.key) + " " + a.usage
	}
	return "  " + strings.Join(parts, " · ") + "\n"
}

// Ask implements UI.
func (t *Terminal) Ask(ctx context.Context, c *Card) (Answer, error) {
	t.start()
	t.drain()
	if t.Raw != nil {
		if restore, err := t.Raw(); err == nil {
			t.setRaw(true)
			defer func() { t.setRaw(false); restore() }()
			// Keys typed before the card (half a line from a card that
			// went away) must not choose for this one.
			t.drain()
		}
	}
	var b strings.Builder
	c.Render(&b, t.now(), t.Color)
	t.say(b.String())
	acts := actions(c)
	for {
		k, err := t.choice(ctx, c, acts)
		if err != nil {
			return Answer{}, err
		}
		if k == 3 || k == 4 { // ctrl-C, ctrl-D
			return Answer{}, ErrQuit
		}
		key, ok := offered(acts, k)
		if !ok {
			t.say(help(acts))
			continue
		}
		switch key {
		case 'a':
			return Answer{Action: approval.ActionAccept, Approve: true}, nil
		case 'l':
			d, err := t.grant(ctx, c)
			if err != nil {
				return Answer{}, err
			}
			if d == "" {
				continue
			}
			return Answer{Action: approval.ActionAccept, Approve: true, Grant: d}, nil
		case 'e':
			edits, err := t.edit(ctx, c)
			if err != nil {
				return Answer{}, err
			}
			reason, err := t.line(ctx, "  reason (optional): ")
			if err != nil {
				return Answer{}, err
			}
			return Answer{Action: approval.ActionAccept, Approve: true, Reason: strings.TrimSpace(reason), Edits: edits}, nil
		case 'd':
			reason, err := t.line(ctx, "  reason, sent to the proposer (optional): ")
			if err != nil {
				return Answer{}, err
			}
			if reason = strings.TrimSpace(reason); reason == "" {
				return Answer{Action: approval.ActionDecline}, nil
			}
			return Answer{Action: approval.ActionAccept, Reason: reason}, nil
		case 'g':
			to, err := t.delegate(ctx, c)
			if err != nil {
				return Answer{}, err
			}
			if to == "" {
				continue
			}
			return Answer{Action: approval.ActionAccept, DelegateTo: to}, nil
		case 'c':
			return Answer{Action: approval.ActionCancel}, nil
		default: // q
			return Answer{}, ErrQuit
		}
	}
}

// prompt is the choice line with the time left, fitted into width columns
// (0: unknown, not fitted). The line must not wrap: the countdown redraws
// it in place with \r, which only reaches back to the start of its last
// row, so a wrapped line would leave a copy behind every second.
func (t *Terminal) prompt(c *Card, acts []action, width int) string {
	var names, keys []string
	for _, a := range acts {
		names = append(names, string(a.key)+" "+a.name)
		keys = append(keys, string(a.key))
	}
	full := strings.Join(names, " · ") + " › "
	short := strings.Join(keys, "/") + " › "
	left := ""
	if dl := c.Deadline(); !dl.IsZero() {
		left = Countdown(dl, t.now())
	}
	type form struct{ count, rest string }
	forms := []form{{"", full}, {"", short}}
	if left != "" {
		forms = []form{{"[" + left + " left] ", full}, {"[" + left + " left] ", short}, {"[" + left + "] ", short}}
	}
	pick := forms[len(forms)-1]
	fits := func(f form) bool { return width <= 0 || utf8.RuneCountInString(f.count+f.rest) < width }
	for _, f := range forms {
		if fits(f) {
			pick = f
			break
		}
	}
	if !fits(pick) {
		r := []rune(pick.count + pick.rest)
		pick = form{"", string(r[:max(width-1, 0)])}
	}
	if pick.count == "" {
		return pick.rest
	}
	return style(t.Color).yellow(pick.count) + pick.rest
}

// choice reads one key: in raw mode a key press, else the first letter of
// a line.
func (t *Terminal) choice(ctx context.Context, c *Card, acts []action) (byte, error) {
	if t.isRaw() {
		return t.rawKey(ctx, c, acts)
	}
	t.say(t.prompt(c, acts, 0))
	line, err := t.readLine(ctx)
	if err != nil {
		return 0, err
	}
	t.lineRead()
	line = strings.TrimSpace(line)
	if line == "" {
		return '?', nil
	}
	return lower(line[0]), nil
}

// rawKey waits for one key in raw mode, redrawing the countdown.
func (t *Terminal) rawKey(ctx context.Context, c *Card, acts []action) (byte, error) {
	draw := func() {
		w, _ := t.size()
		t.showPrompt(t.prompt(c, acts, w))
	}
	draw()
	tick := time.NewTicker(max(t.Tick, 10*time.Millisecond))
	if t.Tick == 0 {
		tick.Reset(time.Second)
	}
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.endPrompt("")
			return 0, ctx.Err()
		case <-tick.C:
			draw()
		case b, ok := <-t.keys:
			switch {
			case !ok:
				t.endPrompt("")
				return 0, ErrQuit
			case b == '\r' || b == '\n' || b == ' ':
				continue
			case b == 0x1b || b >= 0x80:
				// An arrow or function key, or a non-ASCII letter: none
				// is a choice, and the rest of its bytes must not be
				// read as keys ("\x1b[D" would otherwise decline).
				t.skipSequence(b)
				t.endPrompt("")
				return '?', nil
			case b < ' ' || b == 0x7f:
				t.endPrompt("")
				return b, nil
			}
			t.endPrompt(string(rune(b)))
			return lower(b), nil
		}
	}
}

// skipSequence reads the rest of the key that began with b: an escape
// sequence (ESC [ … final, ESC O x, ESC x) or a UTF-8 encoded letter. The
// terminal sends a key's bytes together; sequenceWait covers a slow link.
func (t *Terminal) skipSequence(b byte) {
	next := func() (byte, bool) {
		select {
		case k, ok := <-t.keys:
			return k, ok
		case <-time.After(sequenceWait):
			return 0, false
		}
	}
	if b >= 0x80 {
		n := 1 // a continuation byte on its own: nothing follows
		switch {
		case b >= 0xf0:
			n = 4
		case b >= 0xe0:
			n = 3
		case b >= 0xc0:
			n = 2
		}
		for range n - 1 {
			if _, ok := next(); !ok {
				return
			}
		}
		return
	}
	k, ok := next()
	if !ok {
		return
	}
	switch k {
	case '[':
		// CSI: parameters and intermediates, then a final byte @ to ~.
		for {
			k, ok := next()
			if !ok || (k >= 0x40 && k <= 0x7e) {
				return
			}
		}
	case 'O':
		_, _ = next()
	}
}

// sequenceWait is how long skipSequence waits for the next byte of a key.
const sequenceWait = 30 * time.Millisecond

// readLine reads up to the end of a line (line mode).
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

// line asks for free text. In raw mode it is edited on the terminal, and
// what comes back is what the screen showed; either way control
// characters are taken out.
func (t *Terminal) line(ctx context.Context, prompt string) (string, error) {
	if t.isRaw() {
		return t.editLine(ctx, prompt)
	}
	t.say(prompt)
	s, err := t.readLine(ctx)
	if err == nil {
		t.lineRead()
	}
	return clean(s), err
}

// editLine reads one line with golang.org/x/term's line editor.
func (t *Terminal) editLine(ctx context.Context, prompt string) (string, error) {
	ed := term.NewTerminal(editIO{ctx: ctx, t: t}, prompt)
	if w, h := t.size(); w > 0 {
		_ = ed.SetSize(w, max(h, 1))
	}
	t.mu.Lock()
	t.editor = ed
	t.mu.Unlock()
	s, err := ed.ReadLine()
	t.mu.Lock()
	t.editor = nil
	t.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, term.ErrPasteIndicator):
		return clean(s), nil
	case ctx.Err() != nil:
		t.say("\n")
		return "", ctx.Err()
	case errors.Is(err, io.EOF): // ctrl-C, ctrl-D, or the input ended
		t.say("\n")
		return "", ErrQuit
	}
	return "", fmt.Errorf("read %q: %w", strings.TrimSpace(prompt), err)
}

// editIO is the line editor's terminal: keys from the Terminal's reader,
// ending when the card goes away, and output straight to Out (say hands
// other output to the editor while it is live, so the two do not mix).
type editIO struct {
	ctx context.Context
	t   *Terminal
}

func (e editIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	select {
	case <-e.ctx.Done():
		return 0, e.ctx.Err()
	case b, ok := <-e.t.keys:
		if !ok {
			return 0, io.EOF
		}
		p[0] = b
		n := 1
		for n < len(p) {
			select {
			case b, ok := <-e.t.keys:
				if !ok {
					return n, nil
				}
				p[n] = b
				n++
			default:
				return n, nil
			}
		}
		return n, nil
	}
}

func (e editIO) Write(p []byte) (int, error) { return e.t.Out.Write(p) }

// escapeSequence matches ANSI escape sequences (CSI, SS3 and two-byte
// ones), which a line read without an editor holds as typed.
var escapeSequence = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|O.|[@-Z\\-_])`)

// clean takes control characters out of typed text: escape sequences
// whole, then every other control character (a line editor already acted
// on them). They must never reach the proposer's chat or the audit log.
func clean(s string) string {
	s = escapeSequence.ReplaceAllString(s, "")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
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
			text, err := t.line(ctx, fmt.Sprintf("  %s [%s]: ", printable.String(label), printable.String(display(f.Default))))
			if err != nil {
				return nil, err
			}
			if strings.TrimSpace(text) == "" {
				break
			}
			v, err := ParseValue(f, text)
			if err != nil {
				t.say("  " + printable.String(err.Error()) + "\n")
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

// grant asks how long to allow calls like the card's; "" goes back to the
// choice. The terms are shown again with the choices, so the person reads
// what they give at the moment they give it.
func (t *Terminal) grant(ctx context.Context, c *Card) (string, error) {
	header := fmt.Sprintf("  approve, and allow %s for:\n", printable.String(c.Grant.Terms))
	return t.choose(ctx, header, c.Grant.Offers, "  how long (number or duration, Enter to go back): ")
}

// delegate asks whom to hand the card to; "" goes back to the choice.
func (t *Terminal) delegate(ctx context.Context, c *Card) (string, error) {
	return t.choose(ctx, "", c.Delegates, "  hand to (number or name, Enter to go back): ")
}

// choose lists options numbered under header and reads one, by number or
// as written; "" (Enter, or what is none of them) goes back.
func (t *Terminal) choose(ctx context.Context, header string, options []string, prompt string) (string, error) {
	var list strings.Builder
	list.WriteString(header)
	for i, o := range options {
		fmt.Fprintf(&list, "  %d) %s\n", i+1, printable.String(o))
	}
	t.say(list.String())
	text, err := t.line(ctx, prompt)
	if err != nil {
		return "", err
	}
	text = strings.TrimSpace(text)
	if n, err := strconv.Atoi(text); err == nil && n >= 1 && n <= len(options) {
		return options[n-1], nil
	}
	if slices.Contains(options, text) {
		return text, nil
	}
	if text != "" {
		t.say("  " + printable.String(text) + " is not one of them\n")
	}
	return "", nil
}

// Notify implements UI: one line for each card that ended and why, each
// answer, each outcome, and the fulfiller leaving or coming back.
func (t *Terminal) Notify(ev Event) {
	st := style(t.Color)
	f := printable.String(ev.Fulfiller)
	switch ev.Kind {
	case EventEnded:
		if ev.End.Cause == CauseContested {
			t.say(fmt.Sprintf("%s %s — %s\n", st.red("⚠ contested"), ev.Card.Summary(), ev.End))
			return
		}
		t.say(fmt.Sprintf("%s %s — %s\n", st.red("✗ ended"), ev.Card.Summary(), ev.End))
	case EventSent:
		if ev.Err != nil {
			t.say(fmt.Sprintf("%s %s: %v\n", st.red("✗ not sent"), ev.Card.Summary(), ev.Err))
			return
		}
		t.say(fmt.Sprintf("%s %s — %s\n", st.green("✓ sent"), printable.String(ev.Answer.Describe()), ev.Card.Summary()))
	case EventOutcome:
		mark := st.green("✓ outcome")
		if !ev.Outcome.Fulfilled {
			mark = st.red("✗ outcome")
		}
		t.say(fmt.Sprintf("%s %s — %s\n", mark, ev.Card.Summary(), ev.Outcome))
	case EventFulfillerLeft:
		t.say(st.red("⚠ "+f+" left the space") + ": its cards are closed until it is back\n")
	case EventFulfillerJoined:
		t.say(st.green("✓ "+f+" is in the space") + "\n")
	case EventFulfillerAbsent:
		t.say(st.yellow("⚠ "+f+" is not in the space") + ": cards appear when it joins\n")
	case EventPeers:
		t.say(fmt.Sprintf("%s %s — %s\n", st.dim("· others"), ev.Card.Summary(), Progress(ev.Card, ev.Peers)))
	case EventRefused:
		t.say(st.red("⚠ dropped a prompt") + " claiming to come from " + f + " (" + printable.String(ev.Request) + "): " + printable.String(errText(ev.Err)) + "; not shown. Someone may be forging prompts: tell the operator\n")
	}
}

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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
	if agent.Unmarshal(v, &s) == nil {
		return s
	}
	return string(v)
}

func sameValue(a, b json.RawMessage) bool {
	if b == nil {
		return false
	}
	x, errX := approval.Canonical(a)
	y, errY := approval.Canonical(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

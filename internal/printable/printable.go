// Package printable makes text that others wrote (proposers, tools'
// owners, policies' messages) safe to show a person, on a terminal or a
// page. It is a leaf, shared by the approver's client, the inboxes and the
// offline tools (replay) that print such text.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String makes text from others safe to show a person, on a terminal or
// a page. Control characters (ESC, CR, backspace, C1) and bidirectional
// overrides would let whoever wrote the text — a proposer, a tool's owner —
// move the cursor, reorder or overwrite what the card shows (the digest,
// the arguments), so each is shown escaped instead.
func String(s string) string {
	unsafe := func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == utf8.RuneError
	}
	if !strings.ContainsFunc(s, unsafe) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

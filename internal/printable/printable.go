// Package printable makes text that others wrote (proposers, tools'
// owners, policies' messages) safe to show a person, on a terminal, a
// page, in a notification or a log line. It is a leaf, shared by the
// approver's client, the inboxes, notifications, the decision log and the
// offline tools (replay) that print such text: every surface that shows a
// call escapes the same characters the same way.
package printable

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unsafe reports whether r must not reach a person raw: control
// characters (ESC, CR, backspace, C1), which steer a terminal; format
// characters (bidirectional overrides and isolates, zero-width spaces and
// joiners, the BOM, the soft hyphen, tags), line and paragraph separators,
// and the other default-ignorable characters (Hangul fillers, variation
// selectors), which reorder a line or hide in it without showing
// themselves, so that the text a person reads is not the text that runs;
// and bytes that are not UTF-8.
func Unsafe(r rune) bool {
	if r < 0x7f {
		return r < 0x20
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Bidi_Control,
		unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) || r == utf8.RuneError
}

// String makes text from others safe to show a person, on a terminal or
// a page: each Unsafe character is shown escaped (\u202e, \x1b, \r), the
// rest as written.
func String(s string) string {
	if !strings.ContainsFunc(s, Unsafe) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if Unsafe(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Lines is String line by line: the newlines of text laid out in lines
// (indented JSON) stay, everything else unsafe is escaped.
func Lines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = String(l)
	}
	return strings.Join(lines, "\n")
}

// JSON escapes every Unsafe character of JSON text as a JSON \u escape
// (a surrogate pair beyond the BMP). The text means the same to a JSON
// reader, and a person reading the line (less, grep) sees the escape.
// Outside strings JSON holds only ASCII, so only strings change; text
// that is not UTF-8 is returned unchanged (encoding/json never writes it).
func JSON(b []byte) []byte {
	unsafe := func(r rune) bool { return r >= 0x7f && Unsafe(r) }
	i := 0
	for i < len(b) && b[i] < 0x7f {
		i++ // JSON's own bytes and printable ASCII: nothing to escape
	}
	if i == len(b) || !utf8.Valid(b[i:]) || !containsFunc(b[i:], unsafe) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for _, r := range string(b) {
		if !unsafe(r) {
			out = utf8.AppendRune(out, r)
			continue
		}
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			out = appendU(appendU(out, r1), r2)
			continue
		}
		out = appendU(out, r)
	}
	return out
}

func containsFunc(b []byte, f func(rune) bool) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if f(r) {
			return true
		}
		b = b[n:]
	}
	return false
}

func appendU(out []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(out, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
}

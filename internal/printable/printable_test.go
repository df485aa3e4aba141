package printable

import "testing"

// Text that could steer a terminal or reorder a line is shown escaped;
// anything else, including non-ASCII letters, is shown as written.
func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"write /srv/app/config.yaml", "write /srv/app/config.yaml"},
		{"héllo — 日本", "héllo — 日本"},
		{"p\r\x1b[2Kq", `p\r\x1b[2Kq`},
		{"ring\x07 back\bspace", `ring\a back\bspace`},
		{"abc\u202edef", `abc\u202edef`},
		{"c1\u009b31m", `c1\u009b31m`},
		{"bad \xff byte", `bad \ufffd byte`},
		{"tab\tnew\nline", `tab\tnew\nline`},
		// Invisible characters (issue 41, row 1): isolates, zero-width
		// characters, a BOM, a soft hyphen, tags, line and paragraph
		// separators, fillers and variation selectors change what a
		// reader sees without showing themselves.
		{"ls \u2067# list the\u2069 && rm", `ls \u2067# list the\u2069 && rm`},
		{"r\u200bm -\u200crf\u200d", `r\u200bm -\u200crf\u200d`},
		{"\ufeffa\u00adb\u2060c\u2061", `\ufeffa\u00adb\u2060c\u2061`},
		{"tag\U000e0041\U000e007f", `tag\U000e0041\U000e007f`},
		{"line\u2028para\u2029", `line\u2028para\u2029`},
		{"fill\u3164\u115f\uffa0", `fill\u3164\u115f\uffa0`},
		{"vs\ufe0f\U000e0100", `vs\ufe0f\U000e0100`},
		{"\u180e\u061c\u200e\u200f", `\u180e\u061c\u200e\u200f`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// JSON escapes the same characters in JSON text as \u escapes, so that
// the text reads the same to a JSON reader and shows them to a person.
func TestJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":"plain é 日本"}`, `{"a":"plain é 日本"}`},
		{"{\"m\":\"ls \u2067# list\u2069 && rm\"}", `{"m":"ls \u2067# list\u2069 && rm"}`},
		{"{\"c1\":\"\u009b\",\"tag\":\"\U000e0041\"}", `{"c1":"\u009b","tag":"\udb40\udc41"}`},
	} {
		if got := string(JSON([]byte(tc.in))); got != tc.want {
			t.Errorf("JSON(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

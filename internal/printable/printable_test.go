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
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

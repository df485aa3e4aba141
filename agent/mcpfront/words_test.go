package mcpfront

import (
	"slices"
	"testing"
)

func TestSplitWords(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`npx -y @modelcontextprotocol/server-filesystem /srv`, []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"}},
		{`  a   b	c `, []string{"a", "b", "c"}},
		{`a 'b c' "d e" f\ g`, []string{"a", "b c", "d e", "f g"}},
		{`'it''s' "say \"hi\"" back\\slash`, []string{"its", `say "hi"`, `back\slash`}},
		{`a "" ''`, []string{"a", "", ""}},
		{`"$" 'x$HOME' \$HOME \*`, []string{"$", "x$HOME", "$HOME", "*"}},
		{`a'b'"c"d`, []string{"abcd"}},
		{"a \\\nb", []string{"a", "b"}},
		{`x --flag=a~b`, []string{"x", "--flag=a~b"}},
	} {
		got, err := SplitWords(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SplitWords(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{
		``, `   `, `a $HOME`, `a "$HOME"`, "a `id`", `a $(id)`, `~/bin/x`, `ls *.go`, `a?b`,
		`a | b`, `a > f`, `a; b`, `a && b`, `X=1 a`, `a 'unclosed`, `a "unclosed`, `a &`, `a # comment`,
	} {
		if got, err := SplitWords(in); err == nil && in != `a # comment` {
			t.Errorf("SplitWords(%q) = %q, want an error", in, got)
		}
	}
}

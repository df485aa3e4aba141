package mcpfront

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// SplitWords splits a command line into words as a POSIX shell would
// (blanks separate words; single quotes, double quotes and backslashes
// quote), but expands nothing: no variables, command substitutions,
// tildes or globs, and no operators (pipes, redirections, lists). One of
// those is an error rather than a literal, because a shell would have
// done something with it that fulfiller will not, and the user should
// know before the command runs. `--upstream NAME=cmd:COMMAND ARGS` is
// one argument; this is how it becomes an argv.
func SplitWords(line string) ([]string, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(line), "")
	if err != nil {
		return nil, fmt.Errorf("%q is not a command line: %w", line, err)
	}
	if len(f.Stmts) == 0 {
		return nil, fmt.Errorf("%q holds no command", line)
	}
	if len(f.Stmts) > 1 {
		return nil, fmt.Errorf("%q holds more than one command; quote the ; or newline", line)
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 || len(call.Assigns) > 0 {
		return nil, fmt.Errorf("%q is not a plain command: pipes, redirections, lists and assignments are not run by a shell here; quote them", line)
	}
	out := make([]string, 0, len(call.Args))
	for _, w := range call.Args {
		if err := literalOnly(w); err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		out = append(out, literal(w))
	}
	return out, nil
}

var errExpansion = errors.New("fulfiller expands nothing (no $, `…`, ~ or globs): quote it")

// literalOnly checks that w is made of literal text and quotes alone.
func literalOnly(w *syntax.Word) error {
	for i, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if i == 0 && strings.HasPrefix(p.Value, "~") {
				return fmt.Errorf("a leading ~ in %q: %w", wordText(w), errExpansion)
			}
			if strings.ContainsAny(unescaped(p.Value), "*?[") {
				return fmt.Errorf("a glob in %q: %w", wordText(w), errExpansion)
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				return fmt.Errorf("$'…' in %q: %w", wordText(w), errExpansion)
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				return fmt.Errorf("$\"…\" in %q: %w", wordText(w), errExpansion)
			}
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return fmt.Errorf("an expansion in %q: %w", wordText(w), errExpansion)
				}
			}
		default:
			return fmt.Errorf("an expansion in %q: %w", wordText(w), errExpansion)
		}
	}
	return nil
}

// literal is the word w (literalOnly) after quote removal.
func literal(w *syntax.Word) string {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(unquote(p.Value, ""))
		case *syntax.SglQuoted:
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				b.WriteString(unquote(q.(*syntax.Lit).Value, "$`\"\\\n"))
			}
		}
	}
	return b.String()
}

// unquote removes the backslashes that quote: every one outside quotes
// (only), or inside double quotes those before one of special. A quoted
// newline is a line continuation, and goes too.
func unquote(s, special string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (special == "" || strings.IndexByte(special, s[i+1]) >= 0) {
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescaped drops the characters a backslash quotes, so that `\*` is
// not taken for a glob.
func unescaped(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func wordText(w *syntax.Word) string {
	var b strings.Builder
	_ = syntax.NewPrinter().Print(&b, w)
	return b.String()
}

package policies

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Pretty renders the error for a terminal the way opa check prints Rego
// errors: every error of the load, each on a "file:line:column: code:
// message" line followed by the offending source line and a caret under
// the spot (OPA's own ast.ParserErrorDetail rendering, tab-indented).
// Nothing is folded or cut, so the first line names the file and the first
// problem, and the rest can be read top to bottom. Errors that are not
// Rego errors read as Error does.
func (e *LoadError) Pretty() string {
	if len(e.Rego) == 0 {
		return e.Error()
	}
	return strings.Join(e.Details(), "\n")
}

// Details is every error of the load, one string each, rendered as Pretty
// renders them (a Rego error's string spans its headline, source line and
// caret). The reload log carries them as a list, so that a log viewer
// shows each error whole.
func (e *LoadError) Details() []string {
	if len(e.Rego) == 0 {
		return []string{e.Error()}
	}
	out := make([]string, 0, len(e.Rego)+len(e.Other))
	for _, ae := range e.Rego {
		out = append(out, prettyError(ae, e.File))
	}
	for _, o := range e.Other {
		out = append(out, o.Error())
	}
	return out
}

// prettyError renders one Rego error: its headline, then the offending
// source line and a caret under the spot when known (OPA's own
// ast.ParserErrorDetail rendering, tab-indented).
func prettyError(ae *ast.Error, fallbackFile string) string {
	var b strings.Builder
	b.WriteString(headline(ae, fallbackFile))
	if ae.Details != nil {
		for _, line := range ae.Details.Lines() {
			b.WriteString("\n\t")
			b.WriteString(line)
		}
	}
	return b.String()
}

// headline is "file:line:column: code: message", leaving out what is not
// known. OPA's own Error leaves out the column when it knows the file;
// editors jump to the spot with it.
func headline(e *ast.Error, fallbackFile string) string {
	var b strings.Builder
	file := fallbackFile
	if e.Location != nil && e.Location.File != "" {
		file = e.Location.File
	}
	b.WriteString(file)
	if e.Location != nil && e.Location.Row > 0 {
		b.WriteString(":" + strconv.Itoa(e.Location.Row))
		if e.Location.Col > 0 {
			b.WriteString(":" + strconv.Itoa(e.Location.Col))
		}
	}
	b.WriteString(": " + e.Code + ": " + e.Message)
	return b.String()
}

// inFile makes sure every error names the file it was found in, for
// parse errors whose location the parser left without one.
func inFile(errs ast.Errors, file string) ast.Errors {
	for _, e := range errs {
		switch {
		case e.Location == nil:
			e.Location = &ast.Location{File: file}
		case e.Location.File == "":
			e.Location.File = file
		}
	}
	return errs
}

// withSourceLines gives every error that has a position but no details
// (compile errors: OPA reports only the position) the source line it
// points at, rendered like a parse error's: the line and a caret. The
// bytes come from srcs, the files as they were loaded, or else from disk.
func withSourceLines(errs ast.Errors, srcs []source) {
	for _, e := range errs {
		loc := e.Location
		if e.Details != nil || loc == nil || loc.File == "" || loc.Row < 1 || loc.Col < 1 {
			continue
		}
		data, ok := sourceBytes(loc.File, srcs)
		if !ok {
			continue
		}
		lines := bytes.Split(data, []byte("\n"))
		if loc.Row > len(lines) {
			continue
		}
		line := strings.TrimRight(string(lines[loc.Row-1]), "\r")
		// Col counts characters from 1; the detail's index is the
		// character before which the caret stands, from 0.
		e.Details = &ast.ParserErrorDetail{Line: line, Idx: loc.Col - 1}
	}
}

func sourceBytes(file string, srcs []source) ([]byte, bool) {
	for _, s := range srcs {
		if s.path == file {
			return s.data, true
		}
	}
	data, err := os.ReadFile(file)
	return data, err == nil
}

package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/mewkit/fulfiller/internal/atomicfile"
)

// Format returns src formatted as opa fmt formats Rego v1, with OPA's
// format package. A file that does not parse is a *LoadError with every
// parse error (see LoadError.Pretty).
func Format(path string, src []byte) ([]byte, error) {
	popts := parserOptions
	out, err := format.SourceWithOpts(path, src, format.Opts{
		RegoVersion:   ast.RegoV1,
		ParserOptions: &popts,
	})
	if err != nil {
		var errs ast.Errors
		if errors.As(err, &errs) {
			return nil, regoError(path, inFile(errs, path), []source{{path: path, data: src}})
		}
		return nil, &LoadError{File: path, Err: err}
	}
	return out, nil
}

// RefKey reports whether name can be written as a ref's dotted key
// (x.name) in Rego v1: a variable-compatible string that is no keyword.
// Anything else must be written x["name"].
func RefKey(name string) bool {
	return ast.IsVarCompatibleString(name) && !ast.IsKeywordInRegoVersion(name, ast.RegoV1)
}

// diffContext is how many unchanged lines stand around a change, as in
// diff -u and gofmt -d.
const diffContext = 3

// FormatDiff is a unified diff (diff -u, gofmt -d) from old to formatted,
// the file's text before and after Format; "" when they are equal.
func FormatDiff(path string, old, formatted []byte) string {
	if string(old) == string(formatted) {
		return ""
	}
	dmp := diffmatchpatch.New()
	ca, cb, lines := dmp.DiffLinesToChars(string(old), string(formatted))
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(ca, cb, false), lines)

	type line struct {
		op   diffmatchpatch.Operation
		text string
	}
	var all []line
	for _, d := range diffs {
		text := strings.TrimSuffix(d.Text, "\n")
		for _, l := range strings.Split(text, "\n") {
			all = append(all, line{d.Type, l})
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "--- %s.orig\n+++ %s\n", path, path)
	// Walk the lines, cutting hunks around changes: a hunk ends where more
	// than twice the context of unchanged lines follows a change.
	oldLine, newLine := 1, 1
	for i := 0; i < len(all); {
		if all[i].op == diffmatchpatch.DiffEqual {
			i++
			oldLine++
			newLine++
			continue
		}
		start := max(0, i-diffContext)
		// Find the end of this hunk.
		end, equalRun := i, 0
		for j := i; j < len(all); j++ {
			if all[j].op == diffmatchpatch.DiffEqual {
				equalRun++
				if equalRun > 2*diffContext {
					break
				}
			} else {
				equalRun = 0
				end = j
			}
		}
		stop := min(len(all), end+1+diffContext)
		hunkOld, hunkNew := oldLine-(i-start), newLine-(i-start)
		var nOld, nNew int
		var body strings.Builder
		for _, l := range all[start:stop] {
			switch l.op {
			case diffmatchpatch.DiffEqual:
				body.WriteString(" ")
				nOld++
				nNew++
			case diffmatchpatch.DiffDelete:
				body.WriteString("-")
				nOld++
			case diffmatchpatch.DiffInsert:
				body.WriteString("+")
				nNew++
			}
			body.WriteString(l.text + "\n")
		}
		fmt.Fprintf(&b, "@@ -%s +%s @@\n%s", hunkRange(hunkOld, nOld), hunkRange(hunkNew, nNew), body.String())
		// Advance the counters over the hunk's lines not yet counted.
		for _, l := range all[i:stop] {
			if l.op != diffmatchpatch.DiffInsert {
				oldLine++
			}
			if l.op != diffmatchpatch.DiffDelete {
				newLine++
			}
		}
		i = stop
	}
	return b.String()
}

// hunkRange writes a hunk's "start,count" as diff -u does: a count of 1 is
// left out, and an empty side starts at the line before.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// FormattedFile is one .rego file as read and as Format formats it.
type FormattedFile struct {
	Path      string
	Old       []byte
	Formatted []byte // nil when Err is set
	// Err is why the file could not be formatted: a *LoadError with every
	// parse error.
	Err error
}

// Changed reports whether formatting changes the file.
func (f FormattedFile) Changed() bool { return f.Err == nil && string(f.Old) != string(f.Formatted) }

// FormatFiles formats every .rego file under paths, test files included
// (hidden files and directories are skipped), in lexical order. The error
// is for paths that cannot be read; a file that does not parse has its Err.
func FormatFiles(paths []string) ([]FormattedFile, error) {
	srcs, err := readRegoFiles(paths)
	if err != nil {
		return nil, err
	}
	out := make([]FormattedFile, 0, len(srcs))
	for _, src := range srcs {
		f := FormattedFile{Path: src.path, Old: src.data}
		f.Formatted, f.Err = Format(src.path, src.data)
		out = append(out, f)
	}
	return out, nil
}

// Write replaces the file with its formatted text. It writes a hidden
// temporary file beside it and renames it over the original, keeping the
// original's permissions, so that a running sidecar watching the
// directory never reads a half-written policy (and skips the temporary
// file, being hidden).
func (f FormattedFile) Write() error {
	if f.Err != nil {
		return f.Err
	}
	// Through a symlink, replace the file it points at, not the link.
	path, err := filepath.EvalSymlinks(f.Path)
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	if err := atomicfile.Write(path, f.Formatted, info.Mode().Perm()); err != nil {
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return nil
}

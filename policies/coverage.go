package policies

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/open-policy-agent/opa/v1/ast"
)

// WriteCoverage prints the coverage report for a terminal: the total,
// each file's percentage, and below each file the lines no test reached,
// as "file:first-last" spans (what editors jump to) with the rule they
// belong to. The numbers are OPA's, the same opa test --coverage reports.
func (r TestReport) WriteCoverage(w io.Writer) error {
	rep := r.Coverage
	if rep == nil {
		return fmt.Errorf("no coverage was measured")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "coverage: %.2f%% (%d of %d lines)\n", rep.Coverage, rep.CoveredLines, rep.CoveredLines+rep.NotCoveredLines)
	files := slices.Sorted(maps.Keys(rep.Files))
	width := 0
	for _, file := range files {
		width = max(width, len(file))
	}
	for _, file := range files {
		fmt.Fprintf(&b, "  %-*s %7.2f%%\n", width, file, rep.Files[file].Coverage)
	}
	for _, file := range files {
		for _, s := range r.uncovered(file) {
			fmt.Fprintf(&b, "  not covered: %s:%s", file, s.String())
			if s.rule != "" {
				fmt.Fprintf(&b, " (%s)", s.rule)
			}
			b.WriteByte('\n')
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// span is a run of consecutive lines of one rule.
type span struct {
	first, last int
	rule        string // "rule NAME", "" outside rules
}

func (s span) String() string {
	if s.first == s.last {
		return strconv.Itoa(s.first)
	}
	return strconv.Itoa(s.first) + "-" + strconv.Itoa(s.last)
}

// uncovered merges OPA's column-exact not-covered ranges of file into runs
// of whole lines, the unit a reader looks at (OPA does the same for its
// threshold message), split where one rule or else branch ends and the
// next begins.
func (r TestReport) uncovered(file string) []span {
	var rows []int
	for _, rg := range r.Coverage.Files[file].NotCovered {
		for row := rg.Start.Row; row <= rg.End.Row; row++ {
			rows = append(rows, row)
		}
	}
	slices.Sort(rows)
	rows = slices.Compact(rows)
	var out []span
	for _, row := range rows {
		rule := r.ruleAt(file, row)
		if n := len(out); n > 0 && out[n-1].last+1 == row && out[n-1].rule == rule {
			out[n-1].last = row
			continue
		}
		out = append(out, span{row, row, rule})
	}
	return out
}

// ruleAt names the rule of file that spans row, as "rule NAME" (with
// "else" when it is an else branch), or "" when row is in none.
func (r TestReport) ruleAt(file string, row int) string {
	m := r.modules[file]
	if m == nil {
		return ""
	}
	for _, rule := range m.Rules {
		// A rule's text includes its else branches: the last branch
		// that spans row is the one it is in.
		name := ""
		for n, x := 0, rule; x != nil; n, x = n+1, x.Else {
			if within(x.Location, row) {
				name = "rule " + x.Head.Ref().String()
				if n > 0 {
					name += ", else branch"
				}
			}
		}
		if name != "" {
			return name
		}
	}
	return ""
}

// within reports whether row lies in the text loc spans.
func within(loc *ast.Location, row int) bool {
	if loc == nil {
		return false
	}
	end, _ := loc.End()
	return row >= loc.Row && row <= end
}

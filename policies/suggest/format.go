package suggest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// CheckFormat validates an output format: "pretty" or "json".
func CheckFormat(format string) error {
	if format == "pretty" || format == "json" {
		return nil
	}
	return fmt.Errorf("format %q: want pretty or json", format)
}

// Check runs the generated tests of s, written in dir, with rego (what
// `fulfiller test` and `opa test` run), and records how many passed in
// s.Tests. A failing test is an error: the files must not be handed to a
// policy author as they are.
func Check(ctx context.Context, rego Rego, dir string, s *Suggestion) error {
	passed, failures, err := rego.Test(ctx, []string{filepath.Join(dir, s.RuleFile), filepath.Join(dir, s.TestFile)})
	if err != nil {
		return fmt.Errorf("generated tests of %s: %w", s.Name, err)
	}
	if failures != "" {
		return fmt.Errorf("generated tests of %s fail:\n%s", s.Name, failures)
	}
	s.Tests = passed
	return nil
}

// Print writes what Learn (and Scorer, Check) found, for people or as one
// JSON document ({"out": DIR, "wiring": LINE, ...Result}). out is where
// the files were written.
func Print(w io.Writer, format string, res *Result, out string) error {
	if err := CheckFormat(format); err != nil {
		return err
	}
	if format == "json" {
		doc := struct {
			Out    string `json:"out"`
			Wiring string `json:"wiring"`
			*Result
		}{out, Wiring, res}
		b, err := json.Marshal(doc)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var b strings.Builder
	for _, s := range res.Suggestions {
		fmt.Fprintf(&b, "suggestion %s: %s calling %s on %s\n", s.Name, quote(s.Proposer), quote(s.Tool), serverName(s.Server))
		fmt.Fprintf(&b, "  evidence: %s by %s, %s to %s; %s, none covered\n",
			plural(s.Approvals, "human approval"), quoteAll(s.Approvers), s.First.UTC().Format(time.RFC3339), s.Last.UTC().Format(time.RFC3339),
			plural(s.Declines, "declined call"))
		b.WriteString("  pattern:\n")
		for _, a := range s.Args {
			fmt.Fprintf(&b, "    arguments[%s]: %s\n", quote(a.Name), describe(a, s.Approvals))
		}
		b.WriteString("    any other argument: not allowed\n")
		if sc := s.Score; sc != nil {
			fmt.Fprintf(&b, "  replay, the rule alone: %s\n", scoreLine(sc.Alone))
			if w := sc.WithPolicy; w != nil {
				fmt.Fprintf(&b, "  replay, the current policy with the rule (%s): %s\n", w.Revision, scoreLine(*w))
				if w.AutoDecided == 0 && sc.Alone.AutoDecided > 0 {
					b.WriteString("  note: with the current policy the rule decides nothing: the policy does not consult\n" +
						"    data.fulfiller.suggested, or decides these calls (e.g. escalates them) before it does\n")
				}
			}
		}
		if out != "" {
			fmt.Fprintf(&b, "  wrote %s and %s", filepath.Join(out, s.RuleFile), filepath.Join(out, s.TestFile))
			if s.Tests > 0 {
				fmt.Fprintf(&b, " (%d tests pass)", s.Tests)
			}
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
	for _, k := range res.Skipped {
		fmt.Fprintf(&b, "no suggestion for %s calling %s on %s: %s\n", quote(k.Proposer), quote(k.Tool), serverName(k.Server), k.Reason)
	}
	if len(res.Skipped) > 0 {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "read %d lines: learnt from %d approved and %d declined escalations", res.Lines, res.Approved, res.Declined)
	var notes []string
	for _, n := range []struct {
		count int64
		what  string
	}{
		{res.Edited, "approval of an edited call"},
		{res.Masked, "approval with a masked input"},
		{res.Other, "answered proposal that was no readable tools/call"},
		{res.Evicted, "escalation evicted before its answer"},
		{res.GroupsFull, "answer beyond the group limit"},
		{res.Malformed, "malformed line"},
	} {
		if n.count > 0 {
			notes = append(notes, plural(int(n.count), n.what))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, "; not used: %s", strings.Join(notes, ", "))
	}
	b.WriteByte('\n')
	if len(res.Suggestions) == 0 {
		b.WriteString("no suggestion: no proposer, tool and server had enough human approvals and no decline the pattern would cover\n")
	} else {
		fmt.Fprintf(&b, "%s, nothing applied. Review the files; a main policy consults them with this line\n"+
			"at the end of its decision chain (docs/suggest.md):\n  %s\n", plural(len(res.Suggestions), "suggestion"), Wiring)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func serverName(s string) string {
	if s == "" {
		return "an unknown server"
	}
	return quote(s)
}

func scoreLine(s Score) string {
	line := fmt.Sprintf("%s, %s avoided, %s auto-decided",
		plural(int(s.FalseApprovals), "false approval"), plural(int(s.NeedlessAsksAvoided), "needless ask"), plural(int(s.AutoDecided), "proposal"))
	if s.Errors > 0 {
		line += fmt.Sprintf(" (%s failed closed: raise --policy-timeout)", plural(int(s.Errors), "evaluation"))
	}
	return line
}

// plural counts n things, with an "s" unless there is one.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

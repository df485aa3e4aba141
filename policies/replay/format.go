package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mewkit/fulfiller/internal/printable"
)

// Printer writes a replay's output as it streams: Change for each change
// (pass it as Options.OnChange), then Finish with the report.
type Printer interface {
	Change(Change) error
	Finish(*Report) error
}

// NewPrinter returns the printer for format "pretty" or "json".
func NewPrinter(w io.Writer, format string) (Printer, error) {
	switch format {
	case "pretty":
		return &prettyPrinter{w: w}, nil
	case "json":
		return &jsonPrinter{w: w}, nil
	}
	return nil, fmt.Errorf("format %q: want pretty or json", format)
}

// jsonPrinter writes one JSON document,
// {"changes": [Change...], "summary": Report}, streaming the changes.
type jsonPrinter struct {
	w io.Writer
	n int
}

func (p *jsonPrinter) Change(c Change) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode change: %w", err)
	}
	sep := ",\n"
	if p.n == 0 {
		sep = "{\"changes\":[\n"
	}
	p.n++
	_, err = fmt.Fprintf(p.w, "%s%s", sep, b)
	return err
}

func (p *jsonPrinter) Finish(r *Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	head := "\n]"
	if p.n == 0 {
		head = "{\"changes\":[]"
	}
	_, err = fmt.Fprintf(p.w, "%s,\"summary\":%s}\n", head, b)
	return err
}

// prettyPrinter writes lines for people.
type prettyPrinter struct {
	w io.Writer
	n int
}

func (p *prettyPrinter) Change(c Change) error {
	if p.n == 0 {
		if _, err := fmt.Fprintln(p.w, "changed decisions (line, proposal, proposer, tool: old → new, new reason):"); err != nil {
			return err
		}
	}
	p.n++
	var tags []string
	if c.Reevaluated {
		tags = append(tags, "reevaluated")
	}
	if c.Masked {
		tags = append(tags, "masked input")
	}
	tag := ""
	if len(tags) > 0 {
		tag = " [" + strings.Join(tags, ", ") + "]"
	}
	_, err := fmt.Fprintf(p.w, "  line %d %s %s %s: %s → %s%s%s\n",
		c.Line, printable.String(c.ProposalID), orDash(c.Proposer), orDash(c.Tool), c.Old.Action, c.New.Action, why(c.New), tag)
	return err
}

// why is the new decision's explanation: its reason code, message or error.
func why(v Verdict) string {
	var parts []string
	if v.Reason != "" {
		parts = append(parts, printable.String(v.Reason))
	}
	if v.Error != "" {
		parts = append(parts, "error: "+oneLine(v.Error))
	} else if v.Message != "" {
		parts = append(parts, fmt.Sprintf("%q", v.Message))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// orDash shows a proposer's or tool's name, which the proposer chose:
// control characters are escaped so that a name cannot rewrite the
// terminal.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return printable.String(s)
}

// oneLine folds an error onto one line, with control characters escaped.
func oneLine(s string) string {
	return printable.String(strings.Join(strings.Fields(s), " "))
}

func (p *prettyPrinter) Finish(r *Report) error {
	var b strings.Builder
	if p.n > 0 {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "replayed %d proposals from %d lines with policy revision %s\n", r.Replayed, r.Lines, r.Revision)
	fmt.Fprintf(&b, "changed: %d\n", r.Changed)
	if len(r.Transitions) > 0 {
		b.WriteString("old → new:\n")
		for _, t := range r.Transitions {
			fmt.Fprintf(&b, "  %-8s → %-8s %d\n", t.Old, t.New, t.Count)
		}
	}
	h := r.Humans
	fmt.Fprintf(&b, "human answers: %d (%d approved, %d declined): %d agreements, %d false approvals, %d needless asks, %d asked again\n",
		h.Answered, h.Approved, h.Declined, h.Agreements, h.FalseApprovals, h.NeedlessAsks, h.AskedAgain)
	if r.Masked > 0 {
		fmt.Fprintf(&b, "masked inputs: %d replayed without their erased values (%d of them changed; the mask may be why)\n", r.Masked, r.MaskedChanged)
	}
	if re := r.Reevaluations; re.Replayed > 0 {
		fmt.Fprintf(&b, "re-evaluations after a human edit (not counted above): %d replayed, %d changed\n", re.Replayed, re.Changed)
	}
	if r.NewErrors > 0 {
		fmt.Fprintf(&b, "the candidate policy failed closed (reject policy) %d times\n", r.NewErrors)
	}
	if r.Duplicates > 0 {
		fmt.Fprintf(&b, "duplicate decision records skipped: %d\n", r.Duplicates)
	}
	if r.NoInput > 0 {
		fmt.Fprintf(&b, "decision records without a usable input, not replayed: %d\n", r.NoInput)
	}
	if m := r.Malformed; m.Count > 0 {
		fmt.Fprintf(&b, "malformed lines: %d\n", m.Count)
		for _, l := range m.First {
			fmt.Fprintf(&b, "  line %d: %s\n", l.Line, oneLine(l.Error))
		}
	}
	if pd := r.Pending; pd.Evicted > 0 || pd.Unfinished > 0 {
		fmt.Fprintf(&b, "proposals held for their answer: peak %d of %d, %d evicted (answers not scored), %d unfinished at the end\n",
			pd.Peak, pd.Max, pd.Evicted, pd.Unfinished)
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}

package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/internal/printable"
)

// clean makes a string that others wrote (the proposer's id, a tool's
// name) safe for a mail header or a line of text: control, bidirectional
// and invisible characters are shown escaped (\u202e), as on the cards
// (internal/printable), never raw, so a notification cannot forge a line
// or read otherwise than the call that runs.
func clean(s string) string { return printable.String(s) }

// defang keeps text a proposer chose from forming a link wherever it is
// shown: a ':' and a '.' are written [:] and [.], so that neither a
// scheme (https:, mailto:) nor a domain is left for a mail client or a
// chat to make a link of. It escapes what clean escapes first.
var defang = func() func(string) string {
	r := strings.NewReplacer(":", "[:]", ".", "[.]")
	return func(s string) string { return r.Replace(clean(s)) }
}()

// quoted is text a proposer controls (its id, the proposal's id, the
// tool's name), quoted as such for plain text (mail): in double quotes
// that it cannot close (a quote of its own is shown as '), and defanged,
// so that it can neither pass for fulfiller's words nor form a link.
func quoted(s string) string {
	return `"` + strings.ReplaceAll(defang(s), `"`, "'") + `"`
}

// what says what is asked, in words: `"coder" wants to call "write_file"
// on "fs"`, each name others chose quoted by q.
func what(ev Event, q func(string) string) string {
	call := ev.Tool
	if call == "" {
		call = ev.Method
	}
	return fmt.Sprintf("%s wants to call %s on %s", q(ev.Proposer), q(call), q(ev.Server))
}

// ending says how a prompt ended, in words; a reason others wrote is
// quoted by q.
func ending(ev Event, q func(string) string) string {
	var s string
	switch ev.Outcome {
	case "approved":
		s = "approved"
	case "cancelled":
		s = "no longer asked"
	case "disagree":
		s = "declined"
	case "timeout":
		s = "not answered in time"
	default:
		s = "not approved (" + clean(ev.Outcome) + ")"
	}
	if ev.Reason != "" {
		s += ": " + q(ev.Reason)
	}
	return s
}

// deadline formats a deadline as the cards show it, in UTC.
func deadline(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// arguments lays the arguments out for reading, as the proposal wrote
// them (never re-encoded), escaped line by line as the cards show them;
// "" without them.
func arguments(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return ""
	}
	return printable.Lines(b.String())
}

// headline says what an open prompt's event asks of its reader: a
// reminder and an escalation read differently from the first call.
func headline(t Type) string {
	switch t {
	case PromptReminder:
		return "Reminder: approval still needed"
	case PromptEscalated:
		return "Escalated to you: approval needed"
	}
	return "Approval needed"
}

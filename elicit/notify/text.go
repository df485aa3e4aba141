package notify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/internal/printable"
)

// clean makes a string that others wrote (the proposer's id, a tool's
// name) safe for a mail header or a line of text: control, bidirectional
// and invisible characters are shown escaped (\u202e), as on the cards
// (internal/printable), never raw, so a notification cannot forge a line
// or read otherwise than the call that runs.
func clean(s string) string { return printable.String(s) }

// what says what is asked, in words: "coder wants to call write_file on fs".
func what(ev Event) string {
	call := ev.Tool
	if call == "" {
		call = ev.Method
	}
	return fmt.Sprintf("%s wants to call %s on %s", clean(ev.Proposer), clean(call), clean(ev.Server))
}

// ending says how a prompt ended, in words.
func ending(ev Event) string {
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
		s += ": " + clean(ev.Reason)
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

package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// isControl: control and bidirectional-override characters, which
// could forge lines or reorder what a reader sees.
func isControl(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

// clean makes a string that others wrote (the proposer's id, a tool's
// name) safe for a mail header or a line of text.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

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

// arguments indents the arguments for reading; "" without them.
func arguments(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
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

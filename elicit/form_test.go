package elicit

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/agent"
)

func TestEditableFieldsFromInputSchema(t *testing.T) {
	t.Parallel()
	c := parseCall(agent.MethodToolsCall, json.RawMessage(`{"name":"deploy","arguments":{"replicas":3,"env":"prod","when":"2026-11-22","dry_run":true,"tags":["a"],"approve":"x","ratio":0.5}}`))
	schema := json.RawMessage(`{"type":"object","properties":{
		"replicas":{"type":"integer","description":"how many","minimum":1,"maximum":10},
		"env":{"type":"string","enum":["staging","prod"]},
		"when":{"type":["string","null"],"format":"date","maxLength":10},
		"dry_run":{"type":"boolean"},
		"tags":{"type":"array"},
		"note":{"type":"string"},
		"ratio":{"description":"no type here"}}}`)
	var logs strings.Builder
	fields := editableFields(c, schema, []string{"replicas", "env", "when", "dry_run", "tags", "approve", "note", "ratio", "missing", "env"}, slog.New(slog.NewTextHandler(&logs, nil)))
	got := string(mustMarshal(schemaOf(fields)))
	want := `{"replicas":{"type":"integer","title":"replicas","description":"how many","minimum":1,"maximum":10,"default":3},` +
		`"env":{"type":"string","title":"env","enum":["staging","prod"],"default":"prod"},` +
		`"when":{"type":"string","title":"when","format":"date","maxLength":10,"default":"2026-11-22"},` +
		`"dry_run":{"type":"boolean","title":"dry_run","default":true},` +
		`"note":{"type":"string","title":"note"},` +
		`"ratio":{"type":"number","title":"ratio","description":"no type here","default":0.5}}`
	if got != want {
		t.Errorf("fields\n got %s\nwant %s", got, want)
	}
	for _, w := range []string{"argument=tags", "argument=approve", "argument=missing"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("not logged: %s\n%s", w, logs.String())
		}
	}
}

func schemaOf(fields []field) object {
	o := object{}
	for _, f := range fields {
		o.add(f.name, f.schema)
	}
	return o
}

func TestApplyEdits(t *testing.T) {
	t.Parallel()
	c := parseCall(agent.MethodToolsCall, json.RawMessage(`{"name":"scale","arguments":{"service":"web","replicas":3}}`))
	fields := editableFields(c, json.RawMessage(`{"properties":{"replicas":{"type":"integer"}}}`), []string{"replicas"}, slog.New(slog.DiscardHandler))
	for _, tc := range []struct{ content, params, err string }{
		{`{"approve":true}`, ``, ``},
		{`{"approve":true,"replicas":3.0}`, ``, ``}, // the proposed value sent back is no edit
		{`{"approve":true,"replicas":5,"service":"db"}`, `{"name":"scale","arguments":{"service":"web","replicas":5}}`, ``},
		{`{"approve":true,"replicas":2.5}`, ``, `replicas must be a whole number`},
		{`{"approve":true,"replicas":"5"}`, ``, `replicas must be a number`},
	} {
		p, _, err := applyEdits(c, fields, readForm(json.RawMessage(tc.content)))
		if string(p) != tc.params || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%s: %s %v", tc.content, p, err)
		}
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300)
	c := parseCall(agent.MethodToolsCall, json.RawMessage(`{"name":"write_file","arguments":{"path":"/a","content":"`+long+`"}}`))
	m := message(escalationFor("coder", "fs", "Writes need a human."), c, strings.Repeat("ab", 32), 2, []string{"alice", "bob"})
	want := `bob delegated this to you. coder wants to call write_file on fs with {"path":"/a","content":"` + strings.Repeat("x", 160-len(`{"path":"/a","content":"`)) + `…: Writes need a human. Needs 2 approvals. Call digest abababababab.`
	if m != want {
		t.Errorf("message\n got %s\nwant %s", m, want)
	}
	m = message(escalationFor("coder", "db", ""), parseCall("resources/read", nil), "0123456789abcdef", 1, nil)
	if m != "coder wants to send resources/read to db. Call digest 0123456789ab." {
		t.Errorf("message %s", m)
	}
}

func escalationFor(from, target, msg string) escalation {
	e := escalation{From: from, Target: target}
	e.Decision.Message = msg
	return e
}

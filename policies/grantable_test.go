package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// An escalate decision's grantable offer is read exactly; anything the
// sidecar cannot read exactly is a malformed decision, never a wider grant.
func TestParseGrantable(t *testing.T) {
	d, err := ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix","server"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &Grantable{MaxTTL: 8 * time.Hour, Scope: []GrantField{{Path: "proposer"}, {Path: "tool"}, {Path: "arguments.path", Prefix: true}, {Path: "server"}}}
	if !reflect.DeepEqual(d.Grantable, want) || d.Extra != nil {
		t.Fatalf("Grantable = %+v (extra %v), want %+v", d.Grantable, d.Extra, want)
	}
	// A scope without proposer is a grant for anyone who may propose
	// (docs/design.md "Proposer identity and grants").
	if d, err := ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["tool","arguments.path"]}}`)); err != nil ||
		!reflect.DeepEqual(d.Grantable.Scope, []GrantField{{Path: "tool"}, {Path: "arguments.path"}}) {
		t.Fatalf("scope without proposer: %+v, %v", d.Grantable, err)
	}
	// A Rego set of scope fields arrives sorted: accepted like a list.
	if d, err := ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["tool","proposer"]}}`)); err != nil || len(d.Grantable.Scope) != 2 {
		t.Fatalf("two-field scope: %+v, %v", d.Grantable, err)
	}

	for _, tc := range []struct{ doc, field, msg string }{
		{`{"action":"fulfill","grantable":{"max_ttl":"1h","scope":["proposer","tool"]}}`, "grantable", "only an escalate decision may offer a grant"},
		{`{"action":"reject","reason":"policy","grantable":{"max_ttl":"1h","scope":["proposer","tool"]}}`, "grantable", "only an escalate"},
		{`{"action":"escalate","grantable":true}`, "grantable", "must be an object"},
		{`{"action":"escalate","grantable":{"scope":["proposer","tool"]}}`, "grantable.max_ttl", "missing"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h"}}`, "grantable.scope", "missing"},
		{`{"action":"escalate","grantable":{"max_ttl":"forever","scope":["proposer","tool"]}}`, "grantable.max_ttl", "is not a duration"},
		{`{"action":"escalate","grantable":{"max_ttl":"0s","scope":["proposer","tool"]}}`, "grantable.max_ttl", "must be positive"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool"],"max_uses":3}}`, "grantable", "unknown key"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer"]}}`, "grantable.scope", "must pin tool"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":[]}}`, "grantable.scope", "must pin tool"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool","path"]}}`, "grantable.scope", "is not proposer, tool, server or arguments.NAME"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments."]}}`, "grantable.scope", "top-level argument"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.a.b"]}}`, "grantable.scope", "top-level argument"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool:prefix"]}}`, "grantable.scope", "only an argument can be pinned to a prefix"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.path:glob"]}}`, "grantable.scope", "the only modifier is :prefix"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool","arguments.path","arguments.path:prefix"]}}`, "grantable.scope", "pinned twice"},
		{`{"action":"escalate","grantable":{"max_ttl":"1h","scope":["proposer","tool",""]}}`, "grantable.scope", "non-empty strings"},
	} {
		t.Run(tc.doc, func(t *testing.T) {
			_, err := ParseDecision([]byte(tc.doc))
			var me *MalformedDecisionError
			if !errors.As(err, &me) {
				t.Fatalf("err = %v, want a MalformedDecisionError", err)
			}
			if me.Field != tc.field || !strings.Contains(me.Msg, tc.msg) {
				t.Errorf("err = field %q msg %q, want field %q msg containing %q", me.Field, me.Msg, tc.field, tc.msg)
			}
		})
	}
}

// The offer is written back as the policy wrote it, in the decision log
// and eval's output.
func TestGrantableMarshalJSON(t *testing.T) {
	doc := `{"action":"escalate","quorum":1,"grantable":{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix"]}}`
	d, err := ParseDecision([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.MarshalJSON()
	if err != nil || string(b) != doc {
		t.Fatalf("MarshalJSON = %s, %v; want %s", b, err, doc)
	}
}

package decision

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidReason(t *testing.T) {
	for _, r := range strings.Fields("policy busy incapable timeout invalid duplicate resource_limit unsafe disagree other inappropriate no_longer_needed") {
		if !ValidReason(r) {
			t.Errorf("ValidReason(%q) = false", r)
		}
	}
	for _, r := range []string{"", "Policy", "denied", "rate_limited"} {
		if ValidReason(r) {
			t.Errorf("ValidReason(%q) = true", r)
		}
	}
}

func TestDecisionMarshalJSON(t *testing.T) {
	tests := []struct {
		d    Decision
		want string
	}{
		{Decision{Action: Fulfill, Revision: "sha256:1"}, `{"action":"fulfill","revision":"sha256:1"}`},
		{Decision{Action: Reject, Reason: "busy", Message: "later"}, `{"action":"reject","reason":"busy","message":"later"}`},
		{
			Decision{Action: Escalate, Message: "m", Target: "fs", Approvers: []string{"a", "b"}, Quorum: 2,
				Timeout: 15 * time.Minute, Editable: []string{"path"},
				Extra:    map[string]any{"zeta": 1, "alpha": []any{"x"}, "revision": "forged", "error": "forged"},
				Revision: "sha256:abc"},
			`{"action":"escalate","message":"m","target":"fs","approvers":["a","b"],"quorum":2,"timeout":"15m","editable":["path"],"alpha":["x"],"zeta":1,"revision":"sha256:abc"}`,
		},
		{Decision{Action: Escalate, Quorum: 1, Timeout: 90 * time.Second}, `{"action":"escalate","quorum":1,"timeout":"1m30s"}`},
		{Decision{Action: Escalate, Quorum: 1, Timeout: 2 * time.Hour}, `{"action":"escalate","quorum":1,"timeout":"2h"}`},
		{Decision{Action: Fulfill, Task: true, TaskTimeout: 45 * time.Minute}, `{"action":"fulfill","task":true,"task_timeout":"45m"}`},
		{Decision{Action: Escalate, Quorum: 1, NotifyArguments: true}, `{"action":"escalate","quorum":1,"notify_arguments":true}`},
		{Decision{Action: Escalate, Quorum: 1, Reminders: []time.Duration{90 * time.Second, 10 * time.Minute}, EscalateTo: []Tier{{After: 15 * time.Minute, Approvers: []string{"lead"}}}},
			`{"action":"escalate","quorum":1,"reminders":["1m30s","10m"],"escalate_to":[{"after":"15m","approvers":["lead"]}]}`},
		{Decision{Action: Reject, Reason: ReasonPolicy, Message: "the policy could not decide this proposal", Revision: "sha256:r", Err: fmt.Errorf("boom")},
			`{"action":"reject","reason":"policy","message":"the policy could not decide this proposal","revision":"sha256:r","error":"boom"}`},
	}
	for _, tc := range tests {
		got, err := json.Marshal(tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// A tier survives the pending-work store's JSON exactly, and a stored
// tier that does not read as a policy's is refused, not widened.
func TestTierJSON(t *testing.T) {
	in := []Tier{{After: 90 * time.Second, Approvers: []string{"lead", "cto"}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `[{"after":"1m30s","approvers":["lead","cto"]}]` {
		t.Errorf("marshalled %s", b)
	}
	var back []Tier
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, in) {
		t.Errorf("back %#v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`[{"after":"1m","approvers":[]}]`), &back); err == nil || !strings.Contains(err.Error(), "must name at least one approver") {
		t.Errorf("empty tier read back: %v", err)
	}
}

// The offer is written as the policy wrote it, in the decision log, the
// pending-work store and an elicitation's grant offer.
func TestGrantableMarshalJSON(t *testing.T) {
	g := Grantable{MaxTTL: 8 * time.Hour, Scope: []GrantField{{Path: "proposer"}, {Path: "tool"}, {Path: "arguments.path", Prefix: true}}}
	b, err := json.Marshal(g)
	if want := `{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix"]}`; err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v; want %s", b, err, want)
	}
}

// An offer read back that a policy could not have written is refused
// with the problem named, never read as a wider grant.
func TestGrantableUnmarshalJSONRefuses(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`[]`, "malformed decision: grantable: must be an object with max_ttl and scope, got array"},
		{`{"max_ttl":"8h"}`, "malformed decision: grantable.scope: missing"},
		{`{"scope":["tool"]}`, "malformed decision: grantable.max_ttl: missing"},
		{`{"max_ttl":"-1h","scope":["tool"]}`, `malformed decision: grantable.max_ttl: must be positive, got "-1h"`},
		{`{"max_ttl":"soon","scope":["tool"]}`, `malformed decision: grantable.max_ttl: "soon" is not a duration such as "8h"`},
		{`{"max_ttl":8,"scope":["tool"]}`, "malformed decision: grantable.max_ttl: must be a string, got number"},
		{`{"max_ttl":"8h","scope":"tool"}`, "malformed decision: grantable.scope: must be a list of strings, got string"},
		{`{"max_ttl":"8h","scope":["tool",""]}`, `malformed decision: grantable.scope: must be a list of non-empty strings, found ""`},
		{`{"max_ttl":"8h","scope":["tool","arguments.a.b"]}`, `malformed decision: grantable.scope: "arguments.a.b": want arguments.NAME, a top-level argument`},
		{`{"max_ttl":"8h","scope":["tool"],"wide":true}`, `malformed decision: grantable: unknown key "wide" (want max_ttl and scope)`},
		{`{"max_ttl":"8h","max_ttl":"9h","scope":["tool"]}`, `malformed decision: grantable: key "max_ttl" is given twice`},
		// Keys are checked in order, whatever order they were written in.
		{`{"scope":"tool","max_ttl":"soon"}`, `malformed decision: grantable.max_ttl: "soon" is not a duration such as "8h"`},
	} {
		var g Grantable
		err := json.Unmarshal([]byte(tc.doc), &g)
		var me *MalformedDecisionError
		if err == nil || err.Error() != tc.want || !errors.As(err, &me) {
			t.Errorf("Unmarshal(%s) = %v, want %s", tc.doc, err, tc.want)
		}
	}
}

func TestGrantableOffers(t *testing.T) {
	h := time.Hour
	for _, tc := range []struct {
		max  time.Duration
		want []time.Duration
	}{
		{10 * time.Minute, []time.Duration{10 * time.Minute}},
		{h, []time.Duration{15 * time.Minute, h}},
		{8 * h, []time.Duration{15 * time.Minute, h, 8 * h}},
		{2 * h, []time.Duration{15 * time.Minute, h, 2 * h}},
		{30 * 24 * h, []time.Duration{15 * time.Minute, h, 8 * h, 24 * h, 168 * h, 720 * h}},
	} {
		if got := (Grantable{MaxTTL: tc.max}).Offers(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Offers(max %v) = %v, want %v", tc.max, got, tc.want)
		}
	}
	if got := FormatGrantDuration(90 * time.Minute); got != "1h30m" {
		t.Errorf("FormatGrantDuration(90m) = %q", got)
	}
}

// A stored decision's offer reads back exactly, and a stored offer that
// would be malformed from a policy is refused on the way back too.
func TestGrantableJSONRoundTrip(t *testing.T) {
	in := Grantable{MaxTTL: 8 * time.Hour, Scope: []GrantField{{Path: "proposer"}, {Path: "tool"}, {Path: "arguments.path", Prefix: true}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Grantable
	if err := json.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip of %s = %+v, %v", b, out, err)
	}
	if err := json.Unmarshal([]byte(`{"max_ttl":"8h","scope":["proposer"]}`), &out); err == nil {
		t.Error("a stored offer without tool was read")
	}
}

// Where the gateway does not authenticate senders the policy's proposer
// pin is dropped from the offer, and only it; the policy's own offer is
// left as it was (it is logged as decided).
func TestGrantableWithoutProposer(t *testing.T) {
	g := &Grantable{MaxTTL: time.Hour, Scope: []GrantField{{Path: "proposer"}, {Path: "tool"}, {Path: "arguments.path", Prefix: true}}}
	got := g.WithoutProposer()
	if want := (&Grantable{MaxTTL: time.Hour, Scope: []GrantField{{Path: "tool"}, {Path: "arguments.path", Prefix: true}}}); !reflect.DeepEqual(got, want) {
		t.Errorf("WithoutProposer = %+v, want %+v", got, want)
	}
	if len(g.Scope) != 3 || g.Scope[0].Path != "proposer" {
		t.Errorf("the original offer changed: %+v", g)
	}
	if b, err := json.Marshal(got); err != nil || string(b) != `{"max_ttl":"1h","scope":["tool","arguments.path:prefix"]}` {
		t.Errorf("as JSON %s, %v", b, err)
	}
	if (*Grantable)(nil).WithoutProposer() != nil {
		t.Error("nil offer became an offer")
	}
}

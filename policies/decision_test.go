package policies

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseDecision(t *testing.T) {
	valid := []struct {
		doc  string
		want Decision
	}{
		{`{"action":"fulfill"}`, Decision{Action: Fulfill}},
		{`{"action":"fulfill","message":"ok","target":"fs"}`, Decision{Action: Fulfill, Message: "ok", Target: "fs"}},
		{`{"action":"reject","reason":"policy"}`, Decision{Action: Reject, Reason: "policy"}},
		{`{"action":"reject","reason":"no_longer_needed","message":"m"}`, Decision{Action: Reject, Reason: "no_longer_needed", Message: "m"}},
		{`{"action":"reject","reason":"inappropriate"}`, Decision{Action: Reject, Reason: "inappropriate"}},
		{`{"action":"escalate"}`, Decision{Action: Escalate, Quorum: 1}},
		{`{"action":"escalate","approvers":["alice","bob"],"quorum":2,"timeout":"5m","editable":["path"]}`,
			Decision{Action: Escalate, Approvers: []string{"alice", "bob"}, Quorum: 2, Timeout: 5 * time.Minute, Editable: []string{"path"}}},
		{`{"action":"escalate","quorum":3}`, Decision{Action: Escalate, Quorum: 3}}, // approvers default to the sidecar's
		{`{"action":"escalate","quorum":2.0,"approvers":["a","b"]}`, Decision{Action: Escalate, Quorum: 2, Approvers: []string{"a", "b"}}},
		{`{"action":"escalate","timeout":"1h30m","approvers":[]}`, Decision{Action: Escalate, Quorum: 1, Timeout: 90 * time.Minute, Approvers: []string{}}},
		{`{"action":"fulfill","task":true,"task_timeout":"2h"}`, Decision{Action: Fulfill, Task: true, TaskTimeout: 2 * time.Hour}},
		{`{"action":"escalate","task_timeout":"10m"}`, Decision{Action: Escalate, Quorum: 1, TaskTimeout: 10 * time.Minute}},
		{`{"action":"escalate","notify_arguments":true}`, Decision{Action: Escalate, Quorum: 1, NotifyArguments: true}},
		{`{"action":"escalate","notify_arguments":false}`, Decision{Action: Escalate, Quorum: 1}},
		{`{"action":"escalate","approvers":["alice"],"timeout":"4m","reminders":["2m","30s"],"escalate_to":[{"after":"1m","approvers":["lead"]},{"after":"3m","approvers":["cto","vp"]}]}`,
			Decision{Action: Escalate, Quorum: 1, Approvers: []string{"alice"}, Timeout: 4 * time.Minute, Reminders: []time.Duration{30 * time.Second, 2 * time.Minute},
				EscalateTo: []Tier{{After: time.Minute, Approvers: []string{"lead"}}, {After: 3 * time.Minute, Approvers: []string{"cto", "vp"}}}}},
		// Without a timeout the deadline is the sidecar's: known only when it runs.
		{`{"action":"escalate","reminders":["1h"],"escalate_to":[]}`, Decision{Action: Escalate, Quorum: 1, Reminders: []time.Duration{time.Hour}, EscalateTo: []Tier{}}},
		{`{"action":"fulfill","rule":"r1","score":0.5,"tags":["a"]}`,
			Decision{Action: Fulfill, Extra: map[string]any{"rule": "r1", "score": json.Number("0.5"), "tags": []any{"a"}}}},
	}
	for _, tc := range valid {
		t.Run(tc.doc, func(t *testing.T) {
			got, err := ParseDecision([]byte(tc.doc))
			if err != nil {
				t.Fatalf("ParseDecision: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}

	malformed := []struct {
		doc, field, msg string
	}{
		{`"fulfill"`, "", "must be an object"},
		{`["fulfill"]`, "", "must be an object"},
		{`{}`, "action", "missing"},
		{`{"message":"x"}`, "action", "missing"},
		{`{"action":"allow"}`, "action", `"allow" is not fulfill, reject or escalate`},
		{`{"action":"FULFILL"}`, "action", "is not fulfill"},
		{`{"action":true}`, "action", "must be a string"},
		{`{"action":"reject"}`, "reason", "a reject needs a reason"},
		{`{"action":"reject","reason":"nope"}`, "reason", `"nope" is not a reason code`},
		{`{"action":"reject","reason":""}`, "reason", "a reject needs a reason"},
		{`{"action":"reject","reason":1}`, "reason", "must be a string"},
		{`{"action":"fulfill","message":["x"]}`, "message", "must be a string"},
		{`{"action":"fulfill","target":""}`, "target", "must not be empty"},
		{`{"action":"fulfill","target":7}`, "target", "must be a string"},
		{`{"action":"escalate","approvers":"alice"}`, "approvers", "must be a list of strings"},
		{`{"action":"escalate","approvers":["alice",1]}`, "approvers", "non-empty strings"},
		{`{"action":"escalate","approvers":["alice",""]}`, "approvers", "non-empty strings"},
		{`{"action":"escalate","approvers":["alice","alice"],"quorum":2}`, "approvers", "listed twice"},
		{`{"action":"escalate","quorum":0}`, "quorum", "at least 1"},
		{`{"action":"escalate","quorum":-1}`, "quorum", "at least 1"},
		{`{"action":"escalate","quorum":1.5}`, "quorum", "must be an integer"},
		{`{"action":"escalate","quorum":"2"}`, "quorum", "must be an integer"},
		{`{"action":"escalate","approvers":["alice"],"quorum":2}`, "quorum", "2 approvals needed but only 1 approvers named"},
		{`{"action":"escalate","timeout":300}`, "timeout", "must be a string"},
		{`{"action":"escalate","timeout":"5 minutes"}`, "timeout", "is not a duration"},
		{`{"action":"escalate","timeout":"-5m"}`, "timeout", "must be positive"},
		{`{"action":"escalate","timeout":"0s"}`, "timeout", "must be positive"},
		{`{"action":"fulfill","task":"yes"}`, "task", "must be true or false"},
		{`{"action":"fulfill","task_timeout":"soon"}`, "task_timeout", "is not a duration"},
		{`{"action":"reject","reason":"policy","task":true}`, "task", "only a fulfill or escalate decision may ask for a task"},
		{`{"action":"reject","reason":"policy","task_timeout":"1h"}`, "task_timeout", "only a fulfill or escalate decision may ask for a task"},
		{`{"action":"escalate","notify_arguments":"yes"}`, "notify_arguments", "must be true or false"},
		{`{"action":"fulfill","notify_arguments":true}`, "notify_arguments", "only an escalate decision notifies approvers"},
		{`{"action":"escalate","editable":"path"}`, "editable", "must be a list of strings"},
		{`{"action":"escalate","editable":[1]}`, "editable", "non-empty strings"},
		{`{"action":"escalate","reminders":"10m"}`, "reminders", "must be a list of durations"},
		{`{"action":"escalate","reminders":["ten minutes"]}`, "reminders", `"ten minutes" is not a duration`},
		{`{"action":"escalate","reminders":["0s"]}`, "reminders", "must be positive"},
		{`{"action":"escalate","reminders":[600]}`, "reminders", "must be a string"},
		{`{"action":"escalate","reminders":["10m","600s"]}`, "reminders", "10m is listed twice"},
		{`{"action":"escalate","timeout":"5m","reminders":["5m"]}`, "reminders", "5m is not before the timeout 5m"},
		{`{"action":"fulfill","reminders":["1m"]}`, "reminders", "only an escalate decision has prompts to remind of, this one is fulfill"},
		{`{"action":"escalate","escalate_to":{"after":"1m","approvers":["lead"]}}`, "escalate_to", "must be a list of"},
		{`{"action":"escalate","escalate_to":["lead"]}`, "escalate_to[0]", "must be an object with after and approvers"},
		{`{"action":"escalate","escalate_to":[{"approvers":["lead"]}]}`, "escalate_to[0].after", "missing"},
		{`{"action":"escalate","escalate_to":[{"after":"1m"}]}`, "escalate_to[0].approvers", "missing"},
		{`{"action":"escalate","escalate_to":[{"after":"1m","approvers":[]}]}`, "escalate_to[0].approvers", "must name at least one approver"},
		{`{"action":"escalate","escalate_to":[{"after":"1m","approvers":[""]}]}`, "escalate_to[0].approvers", "non-empty strings"},
		{`{"action":"escalate","escalate_to":[{"after":"-1m","approvers":["lead"]}]}`, "escalate_to[0].after", "must be positive"},
		{`{"action":"escalate","escalate_to":[{"after":"1m","approvers":["lead"],"notify":true}]}`, "escalate_to[0]", "unknown key"},
		{`{"action":"escalate","escalate_to":[{"after":"2m","approvers":["a"]},{"after":"1m","approvers":["b"]}]}`, "escalate_to[1].after", "1m is not after the previous tier's 2m"},
		{`{"action":"escalate","escalate_to":[{"after":"1m","approvers":["a"]},{"after":"2m","approvers":["a"]}]}`, "escalate_to[1].approvers", `"a" is already in an earlier tier`},
		{`{"action":"escalate","approvers":["a"],"escalate_to":[{"after":"1m","approvers":["a"]}]}`, "escalate_to[0].approvers", `"a" is already an approver of the escalation`},
		{`{"action":"escalate","timeout":"4m","escalate_to":[{"after":"4m","approvers":["lead"]}]}`, "escalate_to[0].after", "4m is not before the timeout 4m"},
		{`{"action":"reject","reason":"policy","escalate_to":[{"after":"1m","approvers":["lead"]}]}`, "escalate_to", "only an escalate decision has approvers to escalate to, this one is reject"},
	}
	for _, tc := range malformed {
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
func TestParseDecisionFromRegoSet(t *testing.T) {
	// Rego sets arrive sorted; they are as good as arrays for lists.
	e := loadInline(t, `package fulfiller
decision := {"action": "escalate", "approvers": {"bob", "alice"}, "editable": {"path"}}`)
	d := e.Decide(t.Context(), &Input{})
	if d.Err != nil {
		t.Fatal(d.Err)
	}
	if !reflect.DeepEqual(d.Approvers, []string{"alice", "bob"}) || !reflect.DeepEqual(d.Editable, []string{"path"}) {
		t.Errorf("approvers %v editable %v", d.Approvers, d.Editable)
	}
}
func TestDecisionRoundTrip(t *testing.T) {
	// What the eval command prints can be read back by ParseDecision.
	d := Decision{Action: Escalate, Approvers: []string{"a", "b"}, Quorum: 2, Timeout: 5 * time.Minute, Editable: []string{"path"}, Extra: map[string]any{"k": "v"},
		Reminders: []time.Duration{time.Minute}, EscalateTo: []Tier{{After: 2 * time.Minute, Approvers: []string{"c"}}}}
	b, _ := json.Marshal(d)
	back, err := ParseDecision(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("got %#v, want %#v", back, d)
	}
}

package fulfill

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// The core's Extra is the record's storedDecision as JSON, byte for
// byte, whether marshalled now or remembered from an equal decision, and
// two decisions that differ in any field never share one.
func TestCoreDecisionExtraIsTheStoredDecision(t *testing.T) {
	t.Parallel()
	plain := decision.Decision{Action: decision.Fulfill, Revision: "r1"}
	cases := []struct {
		d      decision.Decision
		route  string
		hinted bool
	}{
		{plain, "calc", false},
		{plain, "calc", false}, // remembered
		{plain, "other", false},
		{plain, "calc", true},
		{decision.Decision{Action: decision.Fulfill, Revision: "r2"}, "calc", false},
		{decision.Decision{Action: decision.Reject, Reason: "policy", Message: "no <writes> & such", Revision: "r1"}, "", false},
		{decision.Decision{Action: decision.Reject, Reason: "policy", Message: "no", Revision: "r1"}, "", false},
		{decision.Decision{Action: decision.Fulfill, Task: true, TaskTimeout: time.Minute, Target: "t"}, "t", false},
		{decision.Decision{Action: decision.Escalate, Approvers: []string{"@caller"}, Quorum: 1, Timeout: time.Second, NotifyArguments: true}, "calc", false},
		{decision.Decision{Action: decision.Escalate, Approvers: []string{"alice"}, Quorum: 1, Timeout: time.Second, NotifyArguments: true}, "calc", false},
		{decision.Decision{Action: decision.Escalate, Editable: []string{"path"}, Grantable: &decision.Grantable{}}, "calc", false},
	}
	for i, c := range cases {
		sd := storedDecisionOf(c.d, c.route, nil, nil)
		sd.DeadlineByProposer = c.hinted
		want, err := json.Marshal(sd)
		if err != nil {
			t.Fatal(err)
		}
		if got := coreDecision(c.d, c.route, c.hinted).Extra; !bytes.Equal(got, want) {
			t.Errorf("case %d: Extra = %s, want %s", i, got, want)
		}
	}
}

// A full memo is emptied, not grown: a policy whose every message
// differs keeps at most its bound of decisions.
func TestPlainExtrasBounded(t *testing.T) {
	t.Parallel()
	for i := range 3 * plainExtras.max {
		d := decision.Decision{Action: decision.Reject, Reason: "policy", Message: string(rune('a'+i%26)) + time.Duration(i).String()}
		_ = coreDecision(d, "", false)
	}
	plainExtras.mu.Lock()
	n := len(plainExtras.m)
	plainExtras.mu.Unlock()
	if n > plainExtras.max {
		t.Fatalf("%d decisions remembered, want at most %d", n, plainExtras.max)
	}
}

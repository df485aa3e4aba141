package policies

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTimeoutUnderLoadIsNotAPolicyVerdict (issue 41, row 13): under CPU
// contention an allowed read was rejected `policy` because its evaluation
// passed --policy-timeout. Load is not a policy verdict: a timed-out
// evaluation is retried once, and a decision the retry makes stands
// (Retried says so, for the decision log); when the retry times out too,
// the answer is `busy`, which a proposer may retry, never `policy`.
func TestTimeoutUnderLoadIsNotAPolicyVerdict(t *testing.T) {
	t.Run("starved once: retried", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"p.rego": "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n"})
		e, err := Load(t.Context(), Options{Policies: []string{dir}, Timeout: 20 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		var attempts []int
		e.stall = func(attempt int) {
			attempts = append(attempts, attempt)
			if attempt == 1 {
				time.Sleep(60 * time.Millisecond) // starved past the timeout
			}
		}
		d := e.Decide(t.Context(), callInput(t, "coder", "read_file", `{"path":"/x"}`, ""))
		if d.Action != Fulfill || d.Err != nil || !d.Retried {
			t.Fatalf("decision %+v (err %v), want the retry's fulfil, marked retried", d, d.Err)
		}
		if len(attempts) != 2 {
			t.Errorf("attempts %v, want two", attempts)
		}
	})
	t.Run("timed out twice: busy", func(t *testing.T) {
		dir := writeTree(t, map[string]string{"p.rego": `package fulfiller

n := numbers.range(1, 5000)
decision := {"action": "fulfill"} if {
	count({x | some a in n; some b in n; x := a * b}) > 0
}
`})
		e, err := Load(t.Context(), Options{Policies: []string{dir}, Timeout: 50 * time.Millisecond, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		d := e.Decide(t.Context(), callInput(t, "coder", "read_file", `{"path":"/x"}`, ""))
		if d.Action != Reject || d.Reason != ReasonBusy || !errors.Is(d.Err, ErrEvalTimeout) || !d.Retried {
			t.Fatalf("decision %+v (err %v), want reject busy after two timeouts", d, d.Err)
		}
		if want := "policy evaluation timed out after 50ms, twice: answered busy"; !strings.HasPrefix(d.Err.Error(), want) {
			t.Errorf("err %q, want it to start %q", d.Err, want)
		}
		if d.Message != BusyMessage {
			t.Errorf("message %q", d.Message)
		}
	})
}

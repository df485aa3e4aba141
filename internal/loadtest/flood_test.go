package loadtest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestFlood sends proposals at full speed with more of them outstanding
// than the fulfiller may hold (window 4096 > max-pending 1000) and checks
// what a proposer relies on: every proposal is answered exactly once, the
// answers add up to what was sent, the invalid ones are rejected invalid,
// and load is shed only with reason busy, never by dropping, timing out or
// failing the policy.
func TestFlood(t *testing.T) {
	// The expirable LRU of the pending store runs a janitor that cannot be
	// stopped (a known limit of golang-lru v2.0.7); other packages ignore
	// it the same way.
	defer goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"))
	n := floodProposals
	if testing.Short() {
		n /= 4
	}
	res, err := Run(t.Context(), Config{
		Policies:   []string{"../../examples/policies"},
		Data:       []string{"../../examples/policies/data.yaml"},
		Proposers:  4,
		Proposals:  n,
		Window:     4096,
		MaxPending: 1000,
		// The run checks the answers' accounting, not the tool's speed:
		// on a starved CI machine the in-process tool may take longer
		// than the 30 s default, and a fulfil timeout is a legitimate
		// second message (docs/design.md rule 4) that would blur the count.
		FulfillTimeout: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if r.Sent != int64(n) || r.SendError != "" {
		t.Fatalf("sent %d of %d proposals (send error %q)", r.Sent, n, r.SendError)
	}
	if r.Unanswered != 0 || r.Duplicates != 0 || r.FulfilTimeouts != 0 || r.Stalled {
		t.Fatalf("unanswered %d, duplicates %d %v, fulfil timeouts %d, stalled %v; want 0, 0, 0, false", r.Unanswered, r.Duplicates, r.DuplicateKinds, r.FulfilTimeouts, r.Stalled)
	}
	if !r.OK() {
		t.Fatalf("report not OK: %+v", r)
	}
	var total int64
	for _, v := range r.Outcomes {
		total += v
	}
	if total != int64(n) || r.Answered != int64(n) {
		t.Fatalf("outcomes add up to %d, answered %d; want %d each (%v)", total, r.Answered, n, r.Outcomes)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Outcomes)) {
		switch k {
		case "fulfilled", "rejected:policy", "rejected:invalid", "rejected:busy":
		default:
			t.Errorf("outcome %q (%d times): load must be shed as busy, nothing else", k, r.Outcomes[k])
		}
	}
	fulfil, reject, invalid := int64(DefaultMix.Count(n, KindFulfil)), int64(DefaultMix.Count(n, KindReject)), int64(DefaultMix.Count(n, KindInvalid))
	if got := r.SentByKind["invalid"]; got != invalid {
		t.Errorf("sent %d invalid proposals, want %d", got, invalid)
	}
	// Validation comes before the pending limit: every invalid proposal is
	// rejected invalid, however busy the fulfiller is.
	if got := r.Outcomes["rejected:invalid"]; got != invalid {
		t.Errorf("rejected:invalid %d, want %d", got, invalid)
	}
	if r.Outcomes["fulfilled"] > fulfil {
		t.Errorf("fulfilled %d, more than the %d read-only proposals", r.Outcomes["fulfilled"], fulfil)
	}
	if r.Outcomes["rejected:policy"] > reject {
		t.Errorf("rejected:policy %d, more than the %d writes no rule allows", r.Outcomes["rejected:policy"], reject)
	}
	if r.Outcomes["rejected:busy"] == 0 {
		t.Errorf("no busy rejects: the flood never filled the pending store (%v)", r.Outcomes)
	}
	if got := r.Outcomes["fulfilled"]; int64(r.Latency.Count) != r.Answered || int64(r.ToolRoundTrip.Count) != got {
		t.Errorf("latency samples %d for %d answers, tool round trips %d for %d fulfilled", r.Latency.Count, r.Answered, r.ToolRoundTrip.Count, got)
	}
	if r.ToolErrors != 0 {
		t.Errorf("%d tool errors: the read-only call should succeed", r.ToolErrors)
	}
}

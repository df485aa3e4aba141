package loadtest

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The bench's help promises that its default window stays under the
// example policy's quota of 50 pending proposals, so that a default run
// measures the fulfiller rather than the quota. A fulfilled proposal stays
// pending at the fulfiller until its tool answers; a window released at
// the fulfilment request let more than 50 pile up and the quota said busy.
func TestDefaultWindowStaysUnderTheExampleQuota(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/hashicorp/golang-lru/v2/expirable.NewLRU[...].func1"))
	n := 2000
	if testing.Short() {
		n = 500
	}
	res, err := Run(t.Context(), Config{
		Policies:  []string{"../../examples/policies"},
		Data:      []string{"../../examples/policies/data.yaml"},
		Proposals: n,
		// Only the quota may say busy here: a policy evaluation slowed
		// past the default 100ms twice by a loaded machine under -race
		// is answered busy too (seen: 49 of 500), which says nothing
		// about the window.
		PolicyTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report
	if !r.OK() {
		t.Fatalf("report not OK: %+v", r)
	}
	if busy := r.Outcomes["rejected:busy"]; busy != 0 {
		t.Fatalf("%d of %d proposals rejected busy with the default window %d (outcomes %v)", busy, n, r.Window, r.Outcomes)
	}
}

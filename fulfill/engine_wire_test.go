package fulfill

import (
	"log/slog"
	"testing"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// nowFront is a front end's Wire whose sends return at once
// (lifecycle.Immediate), as the MCP front end's do.
type nowFront struct{ lifecycle.Wire }

func (nowFront) Immediate(e lifecycle.Effect) bool {
	switch e.(type) {
	case lifecycle.SendRequest, lifecycle.SendReject, lifecycle.Human, lifecycle.CreateGrant, lifecycle.SendPrompt:
		return true
	}
	return false
}

// The engine's wire carries out on the Loop's goroutine what the front
// end's Wire says returns at once, and nothing else: a front end without
// Immediate keeps every effect on workers, and the steps with the humans
// and the grants, which the engine's own part carries out (an Observer
// that may notify, a grant written to the store), stay on workers
// whatever the front end says.
func TestEngineWireImmediateIsTheFrontEnds(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	now := newEngineWire(nowFront{}, nil, Config{}, log)
	plain := newEngineWire(struct{ lifecycle.Wire }{}, nil, Config{}, log)
	for _, tc := range []struct {
		e          lifecycle.Effect
		now, plain bool
	}{
		{lifecycle.SendRequest{}, true, false},
		{lifecycle.SendReject{}, true, false},
		{lifecycle.Status{}, false, false},
		{lifecycle.CancelAsk{}, false, false},
		{lifecycle.Human{}, false, false},
		{lifecycle.CreateGrant{}, false, false},
		// No PromptSender: refused at once, whatever the front end.
		{lifecycle.SendPrompt{}, true, true},
	} {
		if got := now.Immediate(tc.e); got != tc.now {
			t.Errorf("%T with an Immediate front end: Immediate %v, want %v", tc.e, got, tc.now)
		}
		if got := plain.Immediate(tc.e); got != tc.plain {
			t.Errorf("%T with a plain front end: Immediate %v, want %v", tc.e, got, tc.plain)
		}
	}
}

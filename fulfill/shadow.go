package fulfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies"
)

// StageShadow: the shadow policy (Config.Shadow) decided a proposal the
// live policy had decided; Shadow is set. It is never acted on. It may
// come after the proposal's outcome: the shadow runs off the proposal's
// path.
const StageShadow Stage = "shadow"

// defaultShadowQueue is Config.ShadowQueue's default: enough to absorb a
// burst while the shadow worker catches up (an evaluation takes
// microseconds), small enough that the inputs it holds stay bounded.
const defaultShadowQueue = 64

// ShadowResult is what the shadow policy made of one decision of the live
// policy (Event.Shadow, StageShadow).
type ShadowResult struct {
	// Live is the action of the live decision it shadows.
	Live decision.Action
	// Decision is the shadow policy's decision; its Err is set when the
	// shadow failed (error, timeout, panic), and then it does not count
	// as agreeing.
	Decision decision.Decision
	// Agrees is true when the shadow decided without error and chose the
	// live decision's action (reasons, approvers and messages are not
	// compared).
	Agrees bool
	// Latency is the shadow evaluation's duration.
	Latency time.Duration
	// Dropped is set when the shadow queue was full and the decision was
	// not shadowed: then only Live is meaningful.
	Dropped bool
}

// ShadowAction is the label of the shadow's answer in metrics: its action,
// or "error" when it failed.
func (r *ShadowResult) ShadowAction() string {
	if r.Decision.Err != nil {
		return "error"
	}
	return string(r.Decision.Action)
}

// shadowJob is one live decision waiting for the shadow policy.
type shadowJob struct {
	ev   Event // StageShadow, governed by the live decision
	in   *policies.Input
	live decision.Decision
}

// shadowing runs the shadow policy, when there is one, on the decisions
// of the live policy.
//
// It runs asynchronously, on one owner goroutine fed by a bounded queue,
// rather than synchronously after the live decision: the shadow is a
// candidate policy under trial, and a slow or broken candidate must cost
// the live path nothing — no latency, no evaluation slot. When the queue
// is full the decision is not shadowed and the drop is counted (an event
// with Dropped set), so a flood of proposals cannot grow memory. One
// worker also caps the shadow at one core, whatever the load.
type shadowing struct {
	decider Decider
	timeout time.Duration
	queue   chan shadowJob
}

func newShadowing(d Decider, timeout time.Duration, queue int) *shadowing {
	if d == nil {
		return nil
	}
	if timeout <= 0 {
		timeout = policies.DefaultTimeout
	}
	if queue <= 0 {
		queue = defaultShadowQueue
	}
	return &shadowing{decider: d, timeout: timeout, queue: make(chan shadowJob, queue)}
}

// evaluate asks the shadow policy, bounded by the policy timeout. A
// failure of any kind — an error, the timeout, a panic — is the shadow's
// error; nothing of it reaches the live path.
func (s *shadowing) evaluate(ctx context.Context, in *policies.Input, live decision.Decision) (r ShadowResult) {
	r.Live = live.Action
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	defer func() {
		r.Latency = time.Since(start)
		if v := recover(); v != nil {
			r.Decision = decision.Decision{Action: decision.Reject, Reason: decision.ReasonPolicy,
				Err: fmt.Errorf("shadow policy panicked: %v", v)}
		}
		if ctx.Err() != nil && !errors.Is(r.Decision.Err, policies.ErrEvalTimeout) {
			// Past the limit the live policy is held to: a timeout,
			// whether the decider gave up on its context or answered
			// late anyway.
			r.Decision.Err = fmt.Errorf("%w after %v", policies.ErrEvalTimeout, s.timeout)
		}
		r.Agrees = r.Decision.Err == nil && r.Decision.Action == live.Action
	}()
	r.Decision = s.decider.Decide(ctx, in)
	return r
}

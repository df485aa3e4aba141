package fulfill

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/decision"
)

// route decides who carries the call out, or says why nobody can.
func (f *Fulfiller) route(p *proposal, d decision.Decision) (target, why string) {
	target = d.Target
	if target == "" {
		target = p.target
	}
	if target == "" && p.method == agent.MethodToolsCall && p.tool != "" {
		ctx, cancel := context.WithTimeout(f.base, f.cfg.DiscoveryWait)
		owners := f.catalog.lookup(ctx, p.tool)
		cancel()
		switch len(owners) {
		case 0:
			return "", fmt.Sprintf("no participant in the space offers tool %q", p.tool)
		case 1:
			target = owners[0].Server
		default:
			names := make([]string, len(owners))
			for i, o := range owners {
				names[i] = o.Server
			}
			return "", fmt.Sprintf("tool %q is offered by %v; address the proposal to one of them", p.tool, names)
		}
	}
	if target == "" {
		return "", fmt.Sprintf("no participant to send %s to; address the proposal to one", p.method)
	}
	if _, ok := f.space.Participant(target); !ok {
		return "", fmt.Sprintf("%s is not in the space", target)
	}
	payload, _ := json.Marshal(map[string]string{"method": p.method})
	if !f.space.Can(agent.KindRequest, payload) {
		return "", fmt.Sprintf("fulfiller's capabilities do not allow mcp/request %s", p.method)
	}
	return target, ""
}

// checkOwners runs after our own reconnect: a tool owner that left while
// our link was down sent its leave to nobody we could hear, so each
// fulfilment whose owner is not in the new roster gets the same grace as
// after a leave.
func (f *Fulfiller) checkOwners() {
	f.mu.Lock()
	var fulfilling []*proposal
	for _, p := range f.byRequest {
		fulfilling = append(fulfilling, p)
	}
	f.mu.Unlock()
	for _, p := range fulfilling {
		if _, here := f.space.Participant(p.target); !here {
			f.ownerLeft(p)
		} else {
			f.releaseHeld(p.target)
		}
	}
}

// releaseHeld sends the fulfilment requests held for owner, which is back.
// Whoever clears p.held sends it, so a request goes out once.
func (f *Fulfiller) releaseHeld(owner string) {
	f.mu.Lock()
	var ready []*proposal
	for _, p := range f.byRequest {
		if p.held && p.target == owner && p.State() == StateFulfilling {
			p.held = false
			stopTimer(p.stopGone)
			p.stopGone = nil
			ready = append(ready, p)
		}
	}
	f.mu.Unlock()
	for _, p := range ready {
		f.sendRequest(p)
	}
}

// ownerLeft starts p's rejoin grace: its tool owner left while p was being
// fulfilled.
func (f *Fulfiller) ownerLeft(p *proposal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.State() != StateFulfilling || p.stopGone != nil || f.closing {
		return
	}
	f.log.Info("tool owner left during a fulfilment; waiting for it to come back", "proposal", p.env.ID, "target", p.target, "grace", f.cfg.OwnerRejoinGrace)
	p.stopGone = f.clock.AfterFunc(f.cfg.OwnerRejoinGrace, func() { f.ownerGone(p) })
}

// ownerGone ends p's rejoin grace. An owner that is back keeps p: a held
// request goes out now, a sent one waits for its response or the fulfil
// timeout. An owner still away will not answer, so p is rejected
// "incapable", a sent request cancelled first. Taking p.held here
// decides, with releaseHeld, who alone may send a held request.
func (f *Fulfiller) ownerGone(p *proposal) {
	f.mu.Lock()
	p.stopGone = nil
	closing, held := f.closing, p.held
	p.held = false
	f.mu.Unlock()
	if closing {
		return
	}
	if _, here := f.space.Participant(p.target); here {
		if held {
			f.sendRequest(p)
			return
		}
		f.log.Info("tool owner is back; still waiting for its response", "proposal", p.env.ID, "target", p.target)
		return
	}
	msg := fmt.Sprintf("%s left the space before answering", p.target)
	if held {
		msg = fmt.Sprintf("%s was not in the space to carry the call out, and did not come back within %s", p.target, f.cfg.OwnerRejoinGrace)
	}
	if _, ok := f.transition(p, StateRejected, isState(StateFulfilling)); ok {
		if !held {
			// What this fulfiller has heard may lag the space (the
			// leave read after the request was written, the return not
			// read yet): an owner back after all must not run a call
			// its proposer is told it will not. A cancel that reaches
			// nobody costs nothing.
			f.cancelRequest(p, "the tool owner left")
		}
		f.answerReject(p, "incapable", msg)
	}
}

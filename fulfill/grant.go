package fulfill

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mewkit/fulfiller/decision"
	"github.com/mewkit/fulfiller/grants"
	"github.com/mewkit/fulfiller/policies"
)

// grantCall is what grants are matched against for a tools/call.
func grantCall(proposer string, t *policies.Tool) grants.Call {
	c := grants.Call{Proposer: proposer, Tool: t.Name, Server: t.Server}
	_ = json.Unmarshal(t.Arguments, &c.Arguments) // arguments that are not an object match no pin
	return c
}

// grantsCovering are the live grants covering a call, as input.grants
// (nil without grants: the field is then absent).
func (f *Fulfiller) grantsCovering(proposer string, t *policies.Tool, now time.Time) []json.RawMessage {
	if f.cfg.Grants == nil || t == nil || t.Name == "" {
		return nil
	}
	f.awaitGrants()
	var out []json.RawMessage
	for _, g := range f.cfg.Grants.Matching(grantCall(proposer, t), now) {
		b, err := json.Marshal(g)
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	if out == nil {
		out = []json.RawMessage{} // grants are on: the policy sees an empty list
	}
	return out
}

// grantsLoadWait bounds how long a decision waits for the store's grants
// the first time, after a start.
const grantsLoadWait = 10 * time.Second

// awaitGrants waits until the grants in the store are mirrored (once per
// process; after that the registry is never waited on). A proposal read
// in the first moments after a restart was decided as if no grant
// existed, and a human was asked again about a call a grant covered
// (seen in TestRunBinaryGrants under load). Past grantsLoadWait, or at
// shutdown, it decides without them: a missing grant asks a human, the
// safe side.
func (f *Fulfiller) awaitGrants() {
	ready := f.cfg.Grants.Ready()
	select {
	case <-ready:
		return
	default:
	}
	t := time.NewTimer(grantsLoadWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-f.decideCtx.Done():
	case <-t.C:
		f.grantsLate.Do(func() {
			f.log.Warn("grants in the state store not loaded yet; deciding without them (humans are asked where a grant would have allowed)", "waited", grantsLoadWait)
		})
	}
}

// grantOffer is the grant a decision's offer makes possible here: the
// policy's, without its "proposer" pin unless the gateway authenticates
// senders (docs/design.md "Proposer identity and grants": a pin to a
// claimed from would only pretend to narrow the grant). The decision log
// keeps the policy's own offer; the prompt, its stored decision and the
// grant made follow this one, so the approver is shown who can use the
// grant ("anyone who may propose in this space") and gets exactly that.
func (f *Fulfiller) grantOffer(g *decision.Grantable) *decision.Grantable {
	if g == nil || (f.cfg.Grants != nil && f.cfg.Grants.AuthenticatesFrom()) {
		return g
	}
	return g.WithoutProposer()
}

// grantThatDecided names the grant that let a fulfil decision through:
// the policy fulfils with input.grants and would not without them. The
// second evaluation is paid only for fulfils that had grants.
func (f *Fulfiller) grantThatDecided(in *policies.Input, d decision.Decision) string {
	if d.Action != decision.Fulfill || len(in.Grants) == 0 {
		return ""
	}
	without := *in
	without.Grants = []json.RawMessage{}
	if f.decider.Decide(f.decideCtx, &without).Action == decision.Fulfill {
		return "" // fulfilled on its own merits
	}
	var g struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(in.Grants[0], &g) // the oldest covering grant
	return g.ID
}

// makeGrant records the grant an approver chose with their approval of p,
// pinned to the call about to be fulfilled (after edits, the edited one).
// A grant that cannot be made is reported and the approval still stands:
// the human approved this call; the grant was extra.
func (f *Fulfiller) makeGrant(p *proposal, v Verdict, target string, params json.RawMessage) {
	if v.Grant <= 0 || f.cfg.Grants == nil {
		return
	}
	ev := p.event(StageGranted)
	ev.By = v.By
	f.mu.Lock()
	offer := p.decision.Grantable
	f.mu.Unlock()
	name, args := toolCall(params)
	call := grantCall(p.env.From, &policies.Tool{Name: name, Server: target, Arguments: args})
	// The id is the proposal's (in its space): a restart that makes the
	// grant again finds it made.
	sum := sha256.Sum256([]byte(f.cfg.SpaceID + "\x00" + p.env.ID))
	id := "grant-" + hex.EncodeToString(sum[:8])
	by := ""
	if len(v.By) > 0 {
		by = v.By[0]
	}
	g, err := grants.New(id, offer, call, v.Grant, by, time.Now().UTC())
	if err == nil {
		g.Evidence = v.Evidence
		ctx, cancel := f.storeContext()
		err = f.cfg.Grants.Create(ctx, g)
		cancel()
	}
	if err != nil {
		f.log.Warn("grant not made; the approval stands", "proposal", p.env.ID, "by", by, "err", err)
		ev.Message = fmt.Sprintf("no grant made: %v", err)
		f.emit(ev)
		return
	}
	f.log.Info("grant made", "grant", g.ID, "proposal", p.env.ID, "by", by, "proposer", g.Proposer, "tool", g.Tool, "expires", g.Expires)
	ev.GrantID, ev.Message = g.ID, fmt.Sprintf("%s allowed for %s, until %s", g.Terms(), decision.FormatGrantDuration(v.Grant), g.Expires.Format(time.RFC3339))
	f.emit(ev)
}

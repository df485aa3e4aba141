package fulfill

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// ReasonHandedOver is the reason of a StageIgnored event for a proposal
// this member left to the group as it stopped (see handOver): a live
// member adopts its record and answers it.
const ReasonHandedOver = "handed_over"

// handOver leaves this member's pending work to the group when it stops
// while another member is live (docs/design.md "Durable and shared pending
// work"; a rolling restart): nothing is rejected, nothing is sent. Each
// proposal is fenced (its record is no longer this member's to write) and
// ended here without a word; its record stays in the store, still owned
// by this member, and the peers adopt it as on a lapsed lease when the
// store's Close removes the lease (at once, not after --lease): an open
// prompt is asked again by the adopter (same envelope ids), a fulfilment
// request already written is never written again (the adopter awaits its
// response), a task is followed on, queued or undecided work is fulfilled
// or decided there. Open prompts are dropped here without
// notifications/cancelled, which would cancel them at the approvers
// under the adopter too.
//
// It reports how many proposals it left; those it could not (no record
// in the store for a peer to adopt) stay, and shutdown answers them as
// before. With no live peer (or none this member can see: the store
// unreadable) it leaves nothing, and shutdown answers everything "other".
func (f *Fulfiller) handOver(ctx context.Context) int {
	ms, err := f.cfg.Store.Members(ctx)
	if err != nil {
		f.log.Warn("group members not read at shutdown; pending work is answered here, not handed over", "err", err)
		return 0
	}
	peers := 0
	for _, m := range ms {
		if m.ID != f.cfg.Store.Member() {
			peers++
		}
	}
	if peers == 0 {
		return 0
	}
	f.mu.Lock()
	seen := map[*proposal]bool{}
	var ps []*proposal
	add := func(p *proposal) {
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	for _, p := range f.store.all() {
		add(p)
	}
	for _, p := range f.byRequest {
		add(p)
	}
	for _, p := range f.byTask {
		add(p)
	}
	f.mu.Unlock()
	n := 0
	for _, p := range ps {
		if f.handOverOne(p) {
			n++
		}
	}
	if n > 0 {
		f.log.Info(fmt.Sprintf("stopping with %d live group members: %d pending proposals handed over to them, none rejected", peers, n),
			"members", peers, "proposals", n)
	}
	return n
}

// handOverOne fences p and ends it here without a word, leaving its
// record to the group. It reports false, doing nothing, for a proposal
// that has no record here (never recorded, or already another member's)
// or that ended meanwhile.
func (f *Fulfiller) handOverOne(p *proposal) bool {
	if p.State().Terminal() || p.fenced.Load() {
		return false
	}
	// Fenced first, under recMu: a write in progress (a prompt, a
	// request being recorded) completes before, and none follows, so
	// the record the adopter reads is the last this member wrote.
	p.recMu.Lock()
	if p.rec == nil {
		p.recMu.Unlock()
		return false
	}
	p.fenced.Store(true)
	p.rec = nil
	p.recMu.Unlock()
	prev, _, ok := f.end(p, StateSuperseded, func(State) bool { return true }) // closing: no next holders
	if !ok {
		return false
	}
	if prev == StateAwaitingApproval {
		f.cfg.Escalator.Cancel(p.env.ID, DropReason)
	}
	f.mu.Lock() // as in dropAdopted
	ev := p.event(StageIgnored)
	f.mu.Unlock()
	ev.Reason, ev.Message = ReasonHandedOver, "handed over at shutdown to a live member of the group, which adopts it"
	f.emit(ev)
	return true
}

// peerResponses keeps, for a while, the responses to fulfilment requests
// that a member of the group sent and this member does not hold: the
// proposal may be adopted here a moment later (a handover at shutdown,
// a crash), and the adopter must take the response that came in between
// rather than wait for one that will not come again and reject the
// proposal "timeout" after its proposer saw the call answered. Bounded
// in entries, bytes and age; only requests named like a group member's
// (agent.NewID(member)) are kept.
type peerResponses struct {
	mu      sync.Mutex
	byReq   map[string]keptResponse
	order   []string // oldest first
	bytes   int
	members map[string]bool // every member id seen in the group (few)
}

type keptResponse struct {
	env agent.Envelope
	at  time.Time
}

// Bounds of peerResponses: a handover or an adoption takes well under a
// minute; a flood of forged responses costs at most maxPeerBytes.
const (
	maxPeerResponses = 256
	maxPeerBytes     = 8 << 20
	peerResponseAge  = time.Minute
)

func newPeerResponses() *peerResponses {
	return &peerResponses{byReq: map[string]keptResponse{}, members: map[string]bool{}}
}

// sawMembers notes the group's member ids (other than self).
func (r *peerResponses) sawMembers(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if len(r.members) < 1024 {
			r.members[id] = true
		}
	}
}

// keep remembers env, a response to request envelope id cid that this
// member does not hold, when cid is a group member's request id.
func (r *peerResponses) keep(cid string, env agent.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := strings.LastIndexByte(cid, '-')
	if i <= 0 || !r.members[cid[:i]] {
		return
	}
	if _, dup := r.byReq[cid]; dup {
		return // the first counts, as for a held request
	}
	size := len(env.Raw) + len(env.Payload)
	if size > maxPeerBytes {
		return
	}
	r.byReq[cid] = keptResponse{env: env, at: time.Now()}
	r.order = append(r.order, cid)
	r.bytes += size
	for len(r.order) > maxPeerResponses || r.bytes > maxPeerBytes {
		r.dropOldest()
	}
}

func (r *peerResponses) dropOldest() {
	old := r.order[0]
	r.order = r.order[1:]
	if k, ok := r.byReq[old]; ok {
		r.bytes -= len(k.env.Raw) + len(k.env.Payload)
		delete(r.byReq, old)
	}
}

// take returns and forgets the response kept for request cid, if one
// came within peerResponseAge.
func (r *peerResponses) take(cid string) (agent.Envelope, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.order) > 0 {
		k, ok := r.byReq[r.order[0]]
		if ok && time.Since(k.at) < peerResponseAge {
			break
		}
		r.dropOldest()
	}
	k, ok := r.byReq[cid]
	if !ok {
		return agent.Envelope{}, false
	}
	delete(r.byReq, cid)
	r.bytes -= len(k.env.Raw) + len(k.env.Payload)
	return k.env, true
}

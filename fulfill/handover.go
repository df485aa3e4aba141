package fulfill

import (
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

// ReasonHandedOver is the reason of a StageIgnored event for a proposal
// this member left to the group as it stopped (see handOver): a live
// member adopts its record and answers it.
const ReasonHandedOver = "handed_over"

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

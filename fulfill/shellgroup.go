package fulfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/fulfill/state"
)

// watchGroup reads the group's leases every groupRefresh until ctx ends:
// the core's GroupLoad ("busy" when the group is full), and whether a
// live peer is there to take this member's work at shutdown.
func (s *Fulfiller) watchGroup(ctx context.Context) {
	t := time.NewTicker(groupRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.refreshGroup(ctx)
	}
}

func (s *Fulfiller) refreshGroup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	st := s.cfg.Store
	st.SetPending(s.loop.Live())
	ms, err := st.Members(ctx)
	if err != nil {
		s.log.Warn("group members not read", "err", err)
		return
	}
	// The group's load is what each peer published with its lease (one
	// record per member); the core adds its own count as it reads this.
	var capacity, peers int
	var ids []string
	for _, m := range ms {
		capacity += m.MaxPending
		if m.ID != st.Member() {
			ids = append(ids, m.ID)
			peers += m.Pending
		}
	}
	s.peerResps.sawMembers(ids)
	s.group.peers.Store(len(ids) > 0)
	s.group.capacity.Store(int64(capacity))
	if err := s.loop.Post(ctx, lifecycle.GroupLoad{Peers: peers, Capacity: capacity}); err != nil {
		return
	}
}

// adoptLapsed adopts the work of group members whose lease lapsed, until
// ctx ends: each record is resumed here as a restart's is (the Loop
// resumed this member's own at its start), open prompts asked again,
// and a response the member's request got meanwhile is handed over.
func (s *Fulfiller) adoptLapsed(ctx context.Context) {
	for ctx.Err() == nil {
		lapsed, err := s.cfg.Store.WatchLapsed(ctx)
		if err != nil {
			s.log.Error("group leases not watched; trying again", "err", err)
			if !sleepCtx(ctx, retryStore) {
				return
			}
			continue
		}
		for from := range lapsed {
			if from == s.cfg.Store.Member() {
				// This member's own lease from before a restart: its
				// records are this member's, read at start (Loop.Run),
				// and held here already.
				continue
			}
			recs, err := s.cfg.Store.Adopt(ctx, from)
			switch {
			case errors.Is(err, state.ErrMemberAlive):
				s.log.Debug("member reported lapsed is alive; nothing adopted", "member", from)
			case err != nil:
				s.log.Error("work of a lapsed member not adopted", "member", from, "err", err)
			}
			if len(recs) == 0 {
				continue
			}
			s.log.Warn("adopted the pending work of a member whose lease lapsed", "member", from, "proposals", len(recs))
			s.resume(ctx, recs, "adopted from "+from)
		}
	}
}

// resume hands records this member adopted to the core, and then the
// responses their requests got while another member held them.
func (s *Fulfiller) resume(ctx context.Context, recs []*lifecycle.Proposal, how string) {
	ps := s.settle(ctx, recs)
	if len(ps) == 0 {
		return
	}
	s.post(lifecycle.Resumed{Records: ps, How: how})
	for _, p := range ps {
		if p.Request == nil {
			continue
		}
		if env, ok := s.peerResps.take(p.Request.EnvelopeID); ok {
			s.onResponse(env)
		}
	}
}

// settle reads records this member took over (adopted, or taken for an
// operator's cancel) as the core's proposals: each settled first
// (Reclaim: one a replay wrote is deleted and left out).
func (s *Fulfiller) settle(ctx context.Context, recs []*lifecycle.Proposal) []lifecycle.Proposal {
	var ps []lifecycle.Proposal
	for _, r := range recs {
		ok, err := s.cfg.Store.Reclaim(ctx, r)
		if err != nil {
			s.log.Error("record taken over not settled; left for the next scan", "proposal", r.ID, "err", err)
			continue
		}
		if !ok {
			// A replay's record (its seen key holds another claim, whose
			// proposal had its answer): it goes, and nothing is sent.
			if err := s.cfg.Store.Delete(ctx, r); err != nil && !errors.Is(err, state.ErrConflict) {
				s.log.Warn("a replay's record not deleted", "proposal", r.ID, "err", err)
			}
			continue
		}
		if err := s.recordStore.migrate(r); err != nil {
			s.log.Error("record taken over unreadable; skipped", "proposal", r.ID, "err", err)
			continue
		}
		ps = append(ps, *r) // at the revision this member's adopt (or take) wrote
	}
	s.records.held(ps)
	return ps
}

// watchRecords releases, at once and without a word, any proposal whose
// record another member wrote (an operator's take there, an adoption
// after this member's lease lapsed): the fence alone (ErrConflict) acts
// only at this member's next write. Runs until ctx ends.
func (s *Engine) watchRecords(ctx context.Context) {
	for {
		changes, err := s.cfg.Store.WatchRecords(ctx)
		if err != nil {
			s.log.Warn("the group's pending records are not watched; trying again", "err", err)
		} else {
			for c := range changes {
				if c.ProposalID != "" && s.records.theirs(c.ProposalID, c.Revision) {
					s.log.Warn("proposal's record written by another member of the group (taken for an operator's cancel there, or adopted); this member sends nothing more about it", "proposal", c.ProposalID)
					s.records.forget(c.ProposalID)
					s.post(lifecycle.Released{ID: c.ProposalID})
					if te, ok := s.fe.(TakenElsewhere); ok {
						te.TakenElsewhere(c.ProposalID)
					}
				}
			}
		}
		if !sleepCtx(ctx, retryStore) {
			return
		}
	}
}

// handOver leaves this member's pending work to the group as it stops
// while another member is live (a rolling restart): each proposal is
// released here without a word, its record left in the store, which the
// peers adopt when the store's Close removes this member's lease. With no
// live peer it leaves nothing, and Closing answers everything "other".
func (s *Fulfiller) handOver(ctx context.Context) {
	ms, err := s.cfg.Store.Members(ctx)
	if err != nil {
		s.log.Warn("group members not read at shutdown; pending work is answered here, not handed over", "err", err)
		return
	}
	peers := 0
	for _, m := range ms {
		if m.ID != s.cfg.Store.Member() {
			peers++
		}
	}
	if peers == 0 {
		return
	}
	var open []lifecycle.Proposal
	if !s.ask(ctx, func(c *lifecycle.Core) { open = c.Open() }) {
		return
	}
	for _, p := range open {
		s.post(lifecycle.Released{ID: p.ID, Reason: ReasonHandedOver, Message: "handed over at shutdown to a live member of the group, which adopts it"})
	}
	if len(open) > 0 {
		s.log.Info(fmt.Sprintf("stopping with %d live group members: %d pending proposals handed over to them, none rejected", peers, len(open)),
			"members", peers, "proposals", len(open))
	}
}

// checkVetoHolders warns about participants present that can end any
// pending proposal without being a known fellow fulfiller (see peers.go).
func (s *Fulfiller) checkVetoHolders(ps []agent.Participant) {
	var approvers []string
	for _, p := range ps {
		if p.ID == s.space.ID() || slices.Contains(s.cfg.PeerFulfillers, p.ID) {
			continue
		}
		what := canEnd(p.Capabilities)
		if len(what) == 0 {
			continue
		}
		role := RoleOutsider
		if slices.Contains(s.cfg.Approvers, p.ID) && !slices.Contains(what, agent.KindRequest+" tools/call") {
			role = RoleApprover
			approvers = append(approvers, p.ID)
		} else {
			s.log.Warn("a participant that is not a known fulfiller can end any pending proposal (a reject from anyone fails it at the proposer); only its capabilities stop it: grant them only to fulfillers you list in --peer-fulfillers",
				"participant", p.ID, "holds", strings.Join(what, ", "))
		}
		s.emit(Event{Stage: StageVetoHolder, Target: p.ID, By: []string{p.ID}, Reason: role, Message: "holds " + strings.Join(what, ", ")})
	}
	if len(approvers) > 0 {
		s.log.Warn("approvers hold mcp/reject: each can turn down any pending proposal, not only those it is asked about", "approvers", approvers)
	}
}

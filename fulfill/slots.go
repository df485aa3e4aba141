package fulfill

// slots shares the --max-inflight fulfilment slots among proposers, as
// the pending store shares --max-pending: no proposer holds more than
// perProposer at once, and a freed slot goes to the queued proposers in
// turn (round-robin), not to whoever queued the most. Without it one
// proposer's calls to a tool that hangs fill every slot, and everyone
// else's approved calls wait a --fulfill-timeout each.
//
// It is the non-concurrent core: the Fulfiller calls it with f.mu held.
type slots struct {
	max, perProposer int
	used             int
	held             map[string]int         // proposer → slots held
	queued           map[string][]*proposal // proposer → approved calls waiting, FIFO
	turn             []string               // proposers with queued calls, next first
}

func newSlots(max, perProposer int) *slots {
	return &slots{max: max, perProposer: perProposer, held: map[string]int{}, queued: map[string][]*proposal{}}
}

// free reports whether proposer may take a slot now.
func (s *slots) free(proposer string) bool {
	return s.used < s.max && s.held[proposer] < s.perProposer
}

// take gives proposer a slot. A resumed request takes its slot even past
// the limits: it is out already.
func (s *slots) take(proposer string) {
	s.used++
	s.held[proposer]++
}

// give returns a slot proposer held.
func (s *slots) give(proposer string) {
	s.used--
	if s.held[proposer]--; s.held[proposer] <= 0 {
		delete(s.held, proposer)
	}
}

// enqueue makes p wait for a slot, behind its proposer's earlier calls.
func (s *slots) enqueue(p *proposal) {
	from := p.env.From
	if len(s.queued[from]) == 0 {
		s.turn = append(s.turn, from)
	}
	s.queued[from] = append(s.queued[from], p)
}

// next takes the next queued call that may start now, skipping those for
// which waiting reports false (ended while queued), or nil. Its proposer
// goes to the back of the turn.
func (s *slots) next(waiting func(*proposal) bool) *proposal {
	for i := 0; i < len(s.turn) && s.used < s.max; {
		from := s.turn[i]
		q := s.queued[from]
		for len(q) > 0 && !waiting(q[0]) {
			q[0] = nil
			q = q[1:]
		}
		if len(q) == 0 {
			delete(s.queued, from)
			s.turn = append(s.turn[:i], s.turn[i+1:]...)
			continue
		}
		s.queued[from] = q
		if s.held[from] >= s.perProposer {
			i++
			continue
		}
		p := q[0]
		q[0] = nil
		s.turn = append(s.turn[:i], s.turn[i+1:]...)
		if q = q[1:]; len(q) > 0 {
			s.queued[from] = q
			s.turn = append(s.turn, from)
		} else {
			delete(s.queued, from)
		}
		return p
	}
	return nil
}

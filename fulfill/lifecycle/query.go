package lifecycle

// What the shell reads of a Core (through Loop.Do, on the loop's
// goroutine): copies, never the core's own values.

// Get returns a copy of proposal id while it is open (not ended) here.
func (c *Core) Get(id string) (Proposal, bool) {
	e, ok := c.props[id]
	if !ok || e.outcome != Open {
		return Proposal{}, false
	}
	return e.p.copy(), true
}

// Awaited returns the fulfilment request of proposal id while the core
// waits for its response: the proposal open and Fulfilling, its request
// out and not as a task. It copies nothing but the two ids, where Get
// copies the whole proposal: what a front end matching each of its
// upstream's responses needs (the MCP front end's, through Loop.Match).
func (c *Core) Awaited(id string) (requestEnvelopeID, target string, ok bool) {
	e, ok := c.props[id]
	if !ok || e.outcome != Open || e.p.Phase != Fulfilling || e.p.Request == nil || e.p.Request.Task {
		return "", "", false
	}
	return e.p.Request.EnvelopeID, e.p.Request.Target, true
}

// ByRequest returns a copy of the open proposal whose fulfilment request
// has envelope id requestID.
func (c *Core) ByRequest(requestID string) (Proposal, bool) {
	id, ok := c.byRequest[requestID]
	if !ok {
		return Proposal{}, false
	}
	return c.Get(id)
}

// Inflight reports the fulfilment slots held (requests out, or being
// committed).
func (c *Core) Inflight() int { return c.slots.used }

// GroupLoad reports the group's load as of the last GroupLoad event:
// the proposals pending in the group then (this member's and its
// peers') and the group's capacity (0: not read yet).
func (c *Core) GroupLoad() (pending, capacity int) { return c.groupPending, c.groupCap }

// Held returns the ids of the proposals the core still has work for:
// open ones, and ended ones whose record or answer is still being
// written (an ended one kept only to recognise late news is not).
func (c *Core) Held() []string {
	var ids []string
	for id, e := range c.props {
		if e.outcome == Open || e.store.state == writeOut || len(e.store.queue) > 0 || e.answer == answerSending {
			ids = append(ids, id)
		}
	}
	return ids
}

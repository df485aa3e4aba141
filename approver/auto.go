package approver

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/mewkit/fulfiller/elicit"
)

// Auto answers every card at once, without a person: `fulfiller approve
// --auto accept|decline` for scripts and tests. A decline with a reason is
// sent as accept with approve false, so that the reason reaches the
// proposer (MCP's decline carries no content).
type Auto struct {
	Approve bool
	Reason  string
	Out     io.Writer // one line per card; nil: silent

	mu sync.Mutex
}

// Ask implements UI.
func (u *Auto) Ask(_ context.Context, c *Card) (Answer, error) {
	switch {
	case u.Approve:
		return Answer{Action: elicit.ActionAccept, Approve: true, Reason: u.Reason}, nil
	case u.Reason != "":
		return Answer{Action: elicit.ActionAccept, Reason: u.Reason}, nil
	}
	return Answer{Action: elicit.ActionDecline}, nil
}

// Dropped implements UI.
func (u *Auto) Dropped(c *Card, reason string) {
	u.printf("withdrawn  %s (%s)\n", c.Summary(), DroppedReason(reason))
}

// Sent implements UI.
func (u *Auto) Sent(c *Card, a Answer, err error) {
	if err != nil {
		u.printf("not sent   %s: %v\n", c.Summary(), err)
		return
	}
	u.printf("%-10s %s\n", a.Describe(), c.Summary())
}

func (u *Auto) printf(format string, args ...any) {
	if u.Out == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.Out, format, args...)
}

// DroppedReason explains a notifications/cancelled reason to a person.
func DroppedReason(reason string) string {
	switch reason {
	case "withdrawn":
		return "the proposer withdrew it"
	case "timeout":
		return "the deadline passed"
	case "approved":
		return "approved by other approvers"
	case "disagree":
		return "another approver declined"
	case "superseded":
		return "someone answered the proposer directly"
	case "shutdown":
		return "the fulfiller is shutting down"
	case "incapable":
		return "not enough approvers are left"
	case "other", "cancelled", "":
		return "cancelled"
	}
	return reason
}

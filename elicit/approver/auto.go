package approver

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/internal/printable"
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
		return Answer{Action: approval.ActionAccept, Approve: true, Reason: u.Reason}, nil
	case u.Reason != "":
		return Answer{Action: approval.ActionAccept, Reason: u.Reason}, nil
	}
	return Answer{Action: approval.ActionDecline}, nil
}

// Notify implements UI: one line for each card that ended, each answer
// and each outcome.
func (u *Auto) Notify(ev Event) {
	switch ev.Kind {
	case EventEnded:
		u.printf("ended      %s (%s)\n", ev.Card.Summary(), ev.End)
	case EventSent:
		if ev.Err != nil {
			u.printf("not sent   %s: %v\n", ev.Card.Summary(), ev.Err)
			return
		}
		u.printf("%-10s %s\n", ev.Answer.Describe(), ev.Card.Summary())
	case EventOutcome:
		u.printf("outcome    %s: %s\n", ev.Card.Summary(), ev.Outcome)
	case EventFulfillerLeft:
		u.printf("%s left the space\n", printable.String(ev.Fulfiller))
	case EventFulfillerJoined:
		u.printf("%s is in the space\n", printable.String(ev.Fulfiller))
	case EventFulfillerAbsent:
		u.printf("%s is not in the space (yet)\n", printable.String(ev.Fulfiller))
	case EventRefused:
		u.printf("dropped    a prompt claiming to come from %s (%s): %s\n", printable.String(ev.Fulfiller), printable.String(ev.Request), printable.String(errText(ev.Err)))
	}
}

func (u *Auto) printf(format string, args ...any) {
	if u.Out == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.Out, format, args...)
}

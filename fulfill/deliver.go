package fulfill

import (
	"context"
	"errors"

	"github.com/mewkit/fulfiller/agent"
)

// ErrUndelivered is wrapped by Run's error when answers owed at shutdown
// could not be delivered.
var ErrUndelivered = errors.New("answers not delivered")

// Queuer is implemented by a Space that can keep an envelope while the
// link is down and write it after the reconnect (*agent.Client does).
// Cancellations go through it: one lost in an outage would leave a tool
// owner working on a call nobody waits for.
type Queuer interface {
	SendOrQueue(ctx context.Context, env agent.Envelope) (sent agent.Envelope, queued bool, err error)
}

// rejectsTracked is how many recent rejects can still be matched to a
// refusal. The gateway refuses within one round trip of the write, so a
// few thousand cover any burst.
const rejectsTracked = 4096

package fulfill

import (
	"encoding/json"
	"time"

	"github.com/mewkit/fulfiller/grants"
	"github.com/mewkit/fulfiller/policies"
)

// grantCall is what grants are matched against for a tools/call.
func grantCall(proposer string, t *policies.Tool) grants.Call {
	c := grants.Call{Proposer: proposer, Tool: t.Name, Server: t.Server}
	_ = json.Unmarshal(t.Arguments, &c.Arguments) // arguments that are not an object match no pin
	return c
}

// grantsLoadWait bounds how long a decision waits for the store's grants
// the first time, after a start.
const grantsLoadWait = 10 * time.Second

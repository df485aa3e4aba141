package fulfill

import (
	"encoding/json"

	"github.com/mewkit/fulfiller/agent"
)

func capsJSON(caps []agent.Capability) json.RawMessage {
	if caps == nil {
		return nil
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return nil
	}
	return b
}

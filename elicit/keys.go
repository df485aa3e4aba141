package elicit

import (
	"encoding/json"

	"github.com/mewkit/fulfiller/approval"
)

// verifier returns how an approver's answers are checked: nil when the
// approver has no key (the gateway's word is taken).
func (c *Config) verifier(approver string) func(requestID, digest, action string, content json.RawMessage) error {
	if p, ok := c.Passkeys[approver]; ok {
		return func(requestID, digest, action string, content json.RawMessage) error {
			return approval.VerifyPasskey(p, requestID, digest, action, content)
		}
	}
	if key := c.Keys[approver]; key != nil {
		return func(requestID, digest, action string, content json.RawMessage) error {
			return approval.Verify(key, requestID, digest, action, content)
		}
	}
	return nil
}

// keyed returns the approvers of either kind of key, sorted.
func (c *Config) keyed() []string {
	return approval.ApproverKeys{Ed25519: c.Keys, Passkeys: c.Passkeys}.IDs()
}

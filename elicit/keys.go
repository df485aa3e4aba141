package elicit

import (
	"encoding/json"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// currentKeys is the approver key set in force now: CurrentKeys' when
// set (the file is reloaded while the fulfiller runs), else the fixed
// Keys and Passkeys.
func (c *Config) currentKeys() approval.ApproverKeys {
	if c.CurrentKeys != nil {
		return c.CurrentKeys()
	}
	return approval.ApproverKeys{Ed25519: c.Keys, Passkeys: c.Passkeys}
}

// verifier returns how an approver's answers are checked under keys: nil
// when the approver has no key there (the gateway's word is taken).
func verifier(keys approval.ApproverKeys, approver string) func(requestID, digest, action string, content json.RawMessage) error {
	if p, ok := keys.Passkeys[approver]; ok {
		return func(requestID, digest, action string, content json.RawMessage) error {
			return approval.VerifyPasskey(p, requestID, digest, action, content)
		}
	}
	if key := keys.Ed25519[approver]; key != nil {
		return func(requestID, digest, action string, content json.RawMessage) error {
			return approval.Verify(key, requestID, digest, action, content)
		}
	}
	return nil
}

// Package approval is what the fulfiller and an approver's client must
// agree on, byte for byte, about one approval (docs/protocol.md,
// "Escalation by MCP elicitation"): the wire names of the approval form
// and of an answer's action, the call digest (RFC 8785 canonical JSON,
// SHA-256) that names the exact call a human is asked about, and the
// signatures over it: an approver's Ed25519 signature or passkey
// assertion on an answer (Sign, Verify, VerifyPasskey) and the
// fulfiller's signature on a prompt (SignPrompt, VerifyPrompt), with the
// key files that pin those keys.
//
// It is a leaf: it depends on the standard library, an RFC 8785
// implementation and a WebAuthn verifier only, so that the approver's
// client (package approver), the inboxes and anything written against the
// protocol can use it without the sidecar's policy engine or store.
// Package elicit, the sidecar's side, asks and counts with it.
package approval

package approval

// Names of the form's fields, in requestedSchema and in an answer's content.
// Editable arguments with one of these names cannot be offered for editing.
const (
	FieldApprove    = "approve"
	FieldReason     = "reason"
	FieldDelegateTo = "delegate_to"
	FieldSignature  = "signature"
	// FieldGrant is the grant an approver chooses with an approval
	// (docs/design.md "Grants"): "" for none, or one of the offered durations.
	FieldGrant = "grant"
)

// Actions of an MCP elicitation answer (ElicitResult.action).
const (
	ActionAccept  = "accept"
	ActionDecline = "decline"
	ActionCancel  = "cancel"
)

package fulfill

// Reasons of StageIgnored events about answers that claim to come from a
// tool owner: spoof attempts, counted and recorded in the decision log.
const (
	ReasonConflictingResponse = "conflicting_response" // a second, different response to a fulfilment request already answered
	ReasonWrongRPCID          = "wrong_rpc_id"         // a response to our request with a JSON-RPC id that is not the request's
	ReasonMalformedResponse   = "malformed_response"   // a response to our request that is not a JSON-RPC response object
	ReasonResponseFromOther   = "response_from_other"  // a response to our request from a participant it was not sent to
	ReasonSpoofedWithdraw     = "spoofed_withdraw"     // a withdrawal from someone other than the proposer
)

// answeredRequests bounds the record of answered fulfilment requests:
// entries are made only by our own fulfilments, and a late conflicting
// answer normally comes within seconds of the first.
const answeredRequests = 4096

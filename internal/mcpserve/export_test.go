package mcpserve

import "github.com/mewkit/fulfiller/agent/mcpfront"

// CallKey is callKey's key, for the tests that look up the held calls'
// index.
func CallKey(p mcpfront.Proposal) string { k, _ := callKey(p); return k }

// CallKeyOK is callKey, whole.
var CallKeyOK = callKey

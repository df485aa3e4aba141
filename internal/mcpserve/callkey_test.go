package mcpserve_test

import (
	"encoding/json"
	"testing"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/internal/mcpserve"
)

// A retry re-attaches by the call as its client made it: the same key
// whatever the order or spelling of the arguments' JSON, another key for
// another client, upstream, tool or argument, and no key at all for
// arguments with no canonical form (duplicate keys: which one a reader
// keeps is not agreed, so two calls could read as one).
func TestCallKeyNamesTheCall(t *testing.T) {
	t.Parallel()
	call := func(proposer, server, tool, args string) mcpfront.Proposal {
		return mcpfront.Proposal{Proposer: proposer, Server: server, Tool: mcpfront.Tool{Name: tool, Arguments: json.RawMessage(args)}}
	}
	key := func(p mcpfront.Proposal) string {
		k, ok := mcpserve.CallKeyOK(p)
		if !ok {
			t.Fatalf("no key for %+v", p)
		}
		return k
	}
	base := key(call("local", "tables", "drop", `{"table":"users","cascade":true}`))
	if got := key(call("local", "tables", "drop", `{ "cascade": true, "table": "us\u0065rs" }`)); got != base {
		t.Errorf("the same arguments reordered and respelt: key %s, want %s", got, base)
	}
	for _, other := range []mcpfront.Proposal{
		call("other", "tables", "drop", `{"table":"users","cascade":true}`),
		call("local", "tables2", "drop", `{"table":"users","cascade":true}`),
		call("local", "tables", "drop2", `{"table":"users","cascade":true}`),
		call("local", "tables", "drop", `{"table":"orders","cascade":true}`),
		call("local", "tablesd", "rop", `{"table":"users","cascade":true}`), // the parts' bounds count
	} {
		if key(other) == base {
			t.Errorf("%+v has the key of another call", other)
		}
	}
	if k, ok := mcpserve.CallKeyOK(call("local", "tables", "drop", `{"table":"users","table":"orders"}`)); ok {
		t.Errorf("arguments with a duplicate key have key %s, want none", k)
	}
	// Integers past 2^53 that differ round to one double: they have no
	// canonical form, so neither call re-attaches to the other.
	if k, ok := mcpserve.CallKeyOK(call("local", "tables", "drop", `{"id":9007199254740993}`)); ok {
		t.Errorf("arguments with 2^53+1 have key %s, want none", k)
	}
	key(call("local", "tables", "drop", `{"id":9007199254740992}`))
}

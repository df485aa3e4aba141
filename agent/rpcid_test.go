package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
)

// TestRPCIDsComeFromTheConfiguredSource: every request takes its JSON-RPC
// id from Config.RPCIDs (a group's store), and when the source has none
// the request is not sent (ErrNoRPCID) rather than sent with an id that
// may have been used: nothing reaches the peer, and the next id the
// source gives is used as is.
func TestRPCIDsComeFromTheConfiguredSource(t *testing.T) {
	h := newHarness(t)
	h.gw.set(func(g *testGateway) { g.caps["fulfiller-token"] = []Capability{{Kind: "mcp/*"}} })
	calc := h.dial("calculator", nil)
	var mu sync.Mutex
	next, fail := int64(9000), false
	ful := h.dial("fulfiller", func(c *Config) {
		c.RPCIDs = func(context.Context) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return 0, errors.New("state: store not accepting writes")
			}
			next++
			return next, nil
		}
	})
	setFail := func(b bool) { mu.Lock(); fail = b; mu.Unlock() }
	requests := answerRequests(t, calc, func(req RPCRequest) string {
		return `{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{}}`
	})

	resp, err := ful.Request(context.Background(), "calculator", MethodToolsList, nil)
	if err != nil || string(resp.ID) != "9001" {
		t.Fatalf("Request: %+v, %v; want id 9001", resp, err)
	}
	equal(t, "payload on the wire", string((<-requests).Payload), `{"jsonrpc":"2.0","id":9001,"method":"tools/list"}`)

	setFail(true)
	if _, err := ful.Request(context.Background(), "calculator", MethodToolsList, nil); !errors.Is(err, ErrNoRPCID) {
		t.Fatalf("Request without an id: %v, want ErrNoRPCID", err)
	}
	if _, err := ful.RequestEnvelope(context.Background(), Envelope{To: []string{"calculator"}, Payload: json.RawMessage(`{"method":"tools/list"}`)}); !errors.Is(err, ErrNoRPCID) {
		t.Fatalf("RequestEnvelope without an id: %v, want ErrNoRPCID", err)
	}
	// Callers that build payloads (fulfill, elicit) get 0, which Send and
	// SendOrQueue refuse.
	id := ful.NextRPCID()
	equal(t, "NextRPCID without a source", id, int64(0))
	env := Envelope{To: []string{"calculator"}, Kind: KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + `,"method":"tools/call"}`)}
	if _, err := ful.Send(context.Background(), env); !errors.Is(err, ErrNoRPCID) {
		t.Fatalf("Send with id 0: %v, want ErrNoRPCID", err)
	}
	if _, queued, err := ful.SendOrQueue(context.Background(), env); !errors.Is(err, ErrNoRPCID) || queued {
		t.Fatalf("SendOrQueue with id 0: queued %v, %v; want ErrNoRPCID", queued, err)
	}

	setFail(false)
	equal(t, "NextRPCID once the source is back", ful.NextRPCID(), int64(9002))
	resp, err = ful.Request(context.Background(), "calculator", MethodToolsList, nil)
	if err != nil || string(resp.ID) != "9003" {
		t.Fatalf("Request: %+v, %v; want id 9003", resp, err)
	}
	// Only the two requests that had ids reached the calculator.
	equal(t, "next payload on the wire", string((<-requests).Payload), `{"jsonrpc":"2.0","id":9003,"method":"tools/list"}`)
	select {
	case env := <-requests:
		t.Fatalf("a request without an id reached the peer: %s", env.Payload)
	default:
	}
}

// TestRPCIDsOutOfRangeAreRefused: an id source that returns 0, a
// negative id or one JavaScript peers cannot read exactly gives no id.
func TestRPCIDsOutOfRangeAreRefused(t *testing.T) {
	for _, bad := range []int64{0, -5, 1 << 53} {
		c := &Client{cfg: Config{RPCIDs: func(context.Context) (int64, error) { return bad, nil }}}
		if _, err := c.RPCID(context.Background()); !errors.Is(err, ErrNoRPCID) {
			t.Errorf("id %d: %v, want ErrNoRPCID", bad, err)
		}
	}
}

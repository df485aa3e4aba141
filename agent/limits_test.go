package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// deepProposal is a proposal frame whose arguments hold n nested arrays:
// the frame is n+4 levels deep.
func deepProposal(id string, n int) string {
	return `{"protocol":"mew/v0.4","id":"` + id + `","from":"coder","kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"add","arguments":{"x":` +
		strings.Repeat("[", n) + "0" + strings.Repeat("]", n) + `}}}}`
}

// A frame nested deeper than encoding/json's limit (10 000 levels) is not
// an envelope: Decode refuses it, and a session that receives one skips
// it, counts it as malformed and stays up; a frame at the limit is
// delivered. The 100 000-level frame is about 200 KB, well under the read
// limit, so it is the depth and not the size that is refused.
func TestDeeplyNestedFrameIsSkippedNotFatal(t *testing.T) {
	const limit = 10000
	if _, err := Decode([]byte(deepProposal("at-limit", limit-4))); err != nil {
		t.Fatalf("frame at the depth limit: %v", err)
	}
	for _, n := range []int{limit - 3, 100_000} {
		if _, err := Decode([]byte(deepProposal("deep", n))); !errors.Is(err, ErrNotEnvelope) {
			t.Fatalf("%d levels: err %v, want ErrNotEnvelope", n+4, err)
		}
	}

	h := newHarness(t)
	c := h.dial("fulfiller", nil)
	sub := c.Subscribe(SubscribeOptions{})
	h.gw.SendTo("fulfiller", websocket.TextMessage, deepProposal("too-deep", 100_000))
	h.gw.SendTo("fulfiller", websocket.TextMessage, deepProposal("at-limit", limit-4))
	h.gw.SendTo("fulfiller", websocket.TextMessage, chat("next", "x"))

	equal(t, "delivered", recvIDs(t, sub, 2), []string{"at-limit", "next"})
	st := c.Stats()
	if st.Malformed != 1 || st.SessionsLost != 0 || !c.Connected() {
		t.Fatalf("stats = %+v connected=%v", st, c.Connected())
	}
	equal(t, "gateway events", h.gw.Events(), []string{"join fulfiller #1"})
}

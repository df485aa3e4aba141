package agent

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// BenchmarkReadEnvelope is one frame read off the socket and decoded, as
// the session's reader does for every frame the space broadcasts: a
// proposal of about a kilobyte.
//
//	go test -run '^$' -bench ReadEnvelope -benchmem ./agent/
func BenchmarkReadEnvelope(b *testing.B) {
	frame := []byte(`{"protocol":"mew/v0.4","id":"env-1","ts":"2026-11-27T10:00:00Z","from":"coder","to":["fs"],"kind":"mcp/proposal",` +
		`"payload":{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/app/config.yaml","content":"` +
		strings.Repeat("x", 800) + `"}}}}`)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			if err := conn.WriteMessage(websocket.TextMessage, frame); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := &Client{cfg: Config{MaxFrame: 1 << 20}, log: slog.New(slog.DiscardHandler)}
	s := &session{conn: conn}
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		env, ok, err := c.readEnvelope(s, 0)
		if err != nil || !ok || len(env.Raw) != len(frame) {
			b.Fatalf("readEnvelope = %v, %v (%d bytes)", ok, err, len(env.Raw))
		}
	}
}

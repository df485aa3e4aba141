package space

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkBroadcast measures the space end to end over loopback sockets:
// one participant sends chat envelopes as fast as it can and every
// participant (the sender too, as in MEW) reads every one. ns/op is per
// envelope; envelopes/s and frames/s (envelopes times recipients) are
// reported as well.
func BenchmarkBroadcast(b *testing.B) {
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { benchBroadcast(b, n) })
	}
}

func benchBroadcast(b *testing.B, n int) {
	s, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	conns := make([]*websocket.Conn, n)
	for i := range conns {
		ws, _, err := dialer.Dial(s.URL(), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer ws.Close()
		if err := ws.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"type":"join","participantId":"c%d"}`, i)); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ws.ReadMessage(); err != nil { // welcome
			b.Fatal(err)
		}
		conns[i] = ws
	}
	// Everyone but the last joiner has presence frames waiting.
	for i, ws := range conns {
		for range n - 1 - i {
			if _, _, err := ws.ReadMessage(); err != nil {
				b.Fatal(err)
			}
		}
	}

	frame := []byte(`{"kind":"chat","to":["c1"],"payload":{"text":"a benchmark envelope of a typical size, with some text in it"}}`)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, ws := range conns {
		wg.Go(func() {
			for range b.N {
				if _, _, err := ws.ReadMessage(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for range b.N {
		if err := conns[0].WriteMessage(websocket.TextMessage, frame); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64(b.N)/elapsed, "envelopes/s")
	b.ReportMetric(float64(b.N*n)/elapsed, "frames/s")
}

package space

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"

	"github.com/gorilla/websocket"
)

// The recorded session of the reference gateway, replayed against the space:
// every frame a recorded client sent is sent again by a client of the same
// name, and every frame a recorded client received must arrive at the
// replaying client, in the same order, byte for byte except for the ids,
// timestamps and parser wording that no recording can predict (see norm).

type transcriptEntry struct {
	Seq         int             `json:"seq"`
	Scene       string          `json:"scene"`
	Dir         string          `json:"dir"`
	Participant string          `json:"participant"`
	Via         string          `json:"via"`
	NonJSON     bool            `json:"non_json"`
	Binary      bool            `json:"ws_binary_frame"`
	Frame       json.RawMessage `json:"frame"`
}

// bytes returns the frame as it went over the wire.
func (e transcriptEntry) bytes(t testing.TB) []byte {
	if !e.NonJSON {
		return e.Frame
	}
	var s string
	if err := json.Unmarshal(e.Frame, &s); err != nil {
		t.Fatalf("seq %d: %v", e.Seq, err)
	}
	return []byte(s)
}

type httpExchange struct {
	Request struct {
		Method        string          `json:"method"`
		Path          string          `json:"path"`
		Authorization *string         `json:"authorization"`
		Body          json.RawMessage `json:"body"`
	} `json:"request"`
	Response struct {
		Status      int             `json:"status"`
		ContentType string          `json:"content_type"`
		Body        json.RawMessage `json:"body"`
	} `json:"response"`
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// conformanceDir holds the recordings of the reference gateway, kept in the
// repository (see its README).
const conformanceDir = "../../testdata/conformance/mew-v0.4"

func TestReplayReferenceTranscript(t *testing.T) {
	if _, err := os.Stat(conformanceDir); err != nil {
		testenv.Missing(t, "recordings not found at %s (they are part of the repository): %v", conformanceDir, err)
	}
	entries := readJSONL[transcriptEntry](t, conformanceDir+"/transcript.jsonl")
	exchanges := readJSONL[httpExchange](t, conformanceDir+"/http-responses.jsonl")
	s := newLab(t)
	clients := map[string]*testClient{}
	httpClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: readTimeout}
	base := "http://" + strings.TrimPrefix(s.URL(), "ws://")

	closeSocket := func(name string) func() {
		return func() { clients[name].close() }
	}
	exchange := func(x httpExchange, body []byte) {
		t.Helper()
		req, err := http.NewRequest(x.Request.Method, base+x.Request.Path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if a := x.Request.Authorization; a != nil {
			req.Header.Set("Authorization", *a)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != x.Response.Status {
			t.Fatalf("%s %s: status %d %s, want %d", x.Request.Method, x.Request.Path, resp.StatusCode, got, x.Response.Status)
		}
		if strings.HasPrefix(x.Response.ContentType, "text/html") {
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("%s: content type %q, want HTML", x.Request.Path, ct)
			}
			return
		}
		wantFrame(t, "HTTP "+x.Request.Path, got, string(x.Response.Body))
	}

	// Socket closes are not in the transcript; they happened just before
	// the frames that report them.
	before := map[int]func(){
		21:  closeSocket("calculator"),
		374: closeSocket("variant-system-join"),
		382: closeSocket("variant-no-participant-id"),
		389: closeSocket("variant-bad-token"),
		395: closeSocket("variant-no-token"),
		421: closeSocket("dup-socket-1"),
		434: closeSocket("dup-socket-2"),
		462: closeSocket("rejoin-socket"),
		467: func() { // the ghost of rejoin-a, as GET /participants showed it
			exchange(exchanges[len(exchanges)-1], nil)
		},
		521: closeSocket("human"),
		525: closeSocket("calculator"),
		528: closeSocket("proposer"),
		530: closeSocket("fulfiller"),
	}
	skip := func(e transcriptEntry) bool {
		// Streams are not modelled (see the package doc): no stream/open,
		// and stream data is relayed without an authorisation check.
		return e.Scene == "stream-frames" || e.Seq == 251 || e.Seq == 252
	}

	httpSent, compared := 0, 0
	for _, e := range entries {
		if f := before[e.Seq]; f != nil {
			f()
		}
		if e.Via == "http" {
			x := exchanges[httpSent]
			httpSent++
			exchange(x, e.bytes(t))
			continue
		}
		if skip(e) {
			continue
		}
		c := clients[e.Participant]
		switch e.Dir {
		case "sent":
			if c == nil || c.closed() {
				var h http.Header
				if strings.Contains(e.Participant, "auth-header") {
					h = http.Header{"Authorization": {"Bearer observer-token"}}
				}
				c = dial(t, s, e.Participant, h)
				clients[e.Participant] = c
			}
			typ := websocket.TextMessage
			if e.Binary {
				typ = websocket.BinaryMessage
			}
			c.sendType(typ, e.bytes(t))
		case "recv":
			if c == nil {
				t.Fatalf("seq %d: %s never connected", e.Seq, e.Participant)
			}
			f := c.next()
			if wantBinary := e.Binary; wantBinary != (f.typ == websocket.BinaryMessage) {
				t.Fatalf("seq %d: %s got frame type %d, binary=%v expected", e.Seq, e.Participant, f.typ, wantBinary)
			}
			wantFrame(t, e.Participant+" (seq "+strconv.Itoa(e.Seq)+")", f.data, string(e.bytes(t)))
			compared++
		}
	}
	if httpSent != len(exchanges)-1 {
		t.Fatalf("replayed %d HTTP requests, recording has %d", httpSent, len(exchanges)-1)
	}
	t.Logf("%d received frames and %d HTTP exchanges matched the recording", compared, httpSent+1)
	// Nothing beyond the recording arrived anywhere.
	for _, c := range clients {
		if !c.closed() {
			c.quiet(50 * time.Millisecond)
		}
	}
}

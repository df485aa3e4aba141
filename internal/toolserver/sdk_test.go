package toolserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mewkit/fulfiller/agent"
)

// sdkRecording is mew bridge 0.11.0 in front of the reference filesystem
// MCP server, as recorded from the reference gateway.
const sdkRecording = "../../testdata/conformance/mew-v0.4/sdk-bridge.jsonl"

// recordedFS plays the recorded filesystem server's tools that the
// recording calls, with the texts it answered.
func recordedFS() []Tool {
	return []Tool{
		{Name: "read_text_file", Description: "Read a file as text", InputSchema: pathSchema(nil),
			Annotations: map[string]any{"readOnlyHint": true}, TaskSupport: TaskOptional,
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				a, err := parsePath(raw)
				if err != nil {
					return "", err
				}
				if a.Path != "/srv/files/hello.txt" {
					return "", errors.New("Access denied - path outside allowed directories: " + a.Path + " not in /srv/files")
				}
				return "hello from a real file\n", nil
			}},
		{Name: "list_allowed_directories", Description: "List the allowed directories", InputSchema: map[string]any{"type": "object", "properties": map[string]any{}},
			Annotations: map[string]any{"readOnlyHint": true},
			Call: func(context.Context, json.RawMessage) (string, error) {
				return "Allowed directories:\n/srv/files", nil
			}},
	}
}

func recorded(t *testing.T) []agent.Envelope {
	t.Helper()
	f, err := os.Open(filepath.FromSlash(sdkRecording))
	if err != nil {
		t.Fatalf("the SDK recording: %v", err)
	}
	defer f.Close()
	var out []agent.Envelope
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		env, err := agent.Decode(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

func keys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var k []string
	for name := range m {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

// An SDK-style server answers the recorded requests in the recorded
// shapes: the same payload keys (no jsonrpc, no id), the same errors, a
// uuid envelope id, tools/list entries with name, description and
// inputSchema only, and no answer at all to a method it does not handle.
func TestSDKStyleAnswersAsRecorded(t *testing.T) {
	envs := recorded(t)
	conn := &fakeConn{sent: make(chan agent.Envelope, 8)}
	conn.id = "fs"
	s := New(conn, nil, recordedFS()...)
	s.SetStyle(StyleSDK)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, in) }()
	defer func() { cancel(); <-done }()

	answers := map[string]agent.Envelope{}
	for _, env := range envs {
		if env.Kind == agent.KindResponse {
			answers[env.CorrelationID.First()] = env
		}
	}
	for _, req := range envs {
		if req.Kind != agent.KindRequest {
			continue
		}
		in <- req
		want, answered := answers[req.ID]
		if !answered {
			select {
			case got := <-conn.sent:
				t.Fatalf("%s: answered %s; the bridge answers nothing", req.ID, got.Payload)
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		var got agent.Envelope
		select {
		case got = <-conn.sent:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer", req.ID)
		}
		if got.Kind != agent.KindResponse || !slices.Equal(got.To, []string{"requester"}) || got.CorrelationID.First() != req.ID {
			t.Errorf("%s: envelope %+v", req.ID, got)
		}
		if _, err := uuid.Parse(got.ID); err != nil {
			t.Errorf("%s: envelope id %q is no uuid", req.ID, got.ID)
		}
		if k, w := keys(t, got.Payload), keys(t, want.Payload); !reflect.DeepEqual(k, w) {
			t.Errorf("%s: payload keys %v, recorded %v", req.ID, k, w)
		}
		var g, r struct {
			Result struct {
				Content json.RawMessage   `json:"content"`
				IsError bool              `json:"isError"`
				Tools   []json.RawMessage `json:"tools"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(got.Payload, &g)
		_ = json.Unmarshal(want.Payload, &r)
		switch {
		case r.Error != nil:
			if string(got.Payload) != string(want.Payload) {
				t.Errorf("%s: error %s, recorded %s", req.ID, got.Payload, want.Payload)
			}
		case r.Result.Tools != nil:
			if len(g.Result.Tools) != 2 {
				t.Fatalf("tools/list: %s", got.Payload)
			}
			for _, tool := range g.Result.Tools {
				if k, w := keys(t, tool), keys(t, r.Result.Tools[0]); !reflect.DeepEqual(k, w) {
					t.Errorf("tools/list entry keys %v, recorded %v (no annotations, no execution)", k, w)
				}
			}
		default:
			if string(g.Result.Content) != string(r.Result.Content) || g.Result.IsError != r.Result.IsError {
				t.Errorf("%s: result %s, recorded %s", req.ID, got.Payload, want.Payload)
			}
		}
	}
}

// The SDK hands notifications/cancelled and the task methods to no one:
// a cancelled call runs on and is answered; tasks/get is not answered;
// a task-augmented call runs as a plain call.
func TestSDKStyleIgnoresCancellationAndTasks(t *testing.T) {
	conn := &fakeConn{sent: make(chan agent.Envelope, 8)}
	release := make(chan struct{})
	s := New(conn, nil, Tool{Name: "slow", TaskSupport: TaskRequired, Call: func(ctx context.Context, _ json.RawMessage) (string, error) {
		<-release
		return "done", nil
	}})
	s.SetStyle(StyleSDK)
	in := make(chan agent.Envelope)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, in) }()
	defer func() { cancel(); <-done }()

	in <- agent.Envelope{ID: "req-1", From: "fulfiller", To: []string{"calculator"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{},"task":{"ttl":60000}}}`)}
	in <- agent.Envelope{ID: "cancel-1", From: "fulfiller", To: []string{"calculator"}, Kind: agent.KindRequest, CorrelationID: agent.CorrelationIDs{"req-1"},
		Payload: json.RawMessage(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"timeout"}}`)}
	in <- agent.Envelope{ID: "get-1", From: "fulfiller", To: []string{"calculator"}, Kind: agent.KindRequest,
		Payload: json.RawMessage(`{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"taskId":"x"}}`)}
	close(release)
	got := <-conn.sent
	if got.CorrelationID.First() != "req-1" || string(got.Payload) != `{"result":{"content":[{"type":"text","text":"done"}]}}` {
		t.Fatalf("answer %s to %v", got.Payload, got.CorrelationID)
	}
	select {
	case more := <-conn.sent:
		t.Fatalf("answered %s too", more.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies"
)

// ComponentRelay labels the MCP bench's bare relay in its CPU profile.
const ComponentRelay = "relay"

// newBareRelay is the floor of any proxy built on the go-sdk over the
// same transports: a server whose tools/call is forwarded as it came to
// cs (the relay's own session to the tool server) and whose result is
// returned as it came back. No engine, no policy, no log: what is left
// is the two extra hops (each side's decode, dispatch and encode), which
// fulfiller pays too. Every other method is the relay server's own
// (initialize, ping), as the bench's client needs no more.
func newBareRelay(cs *mcp.ClientSession) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: MCPServerName, Version: "relay"},
		&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			r, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			out := &mcp.CallToolParams{Name: r.Params.Name}
			if len(r.Params.Arguments) > 0 {
				out.Arguments = r.Params.Arguments // raw: re-sent as it came
			}
			return cs.CallTool(ctx, out)
		}
	})
	return s
}

// ComponentLineRelay labels the MCP bench's raw line relay.
const ComponentLineRelay = "linerelay"

// lineRelay is the true floor of "two local hops" over stdio (DESIGN,
// "The MCP front end"): a client on OS pipes, two goroutines each
// copying whole lines one way, and a tool server child of its own. No
// JSON is read: what is left is the two pipe hops and the relay's two
// wake-ups per call. It returns the client's transport, and stop,
// which ends the child and waits for the copiers (after the client's
// session is closed).
func lineRelay(ctx context.Context, argv, env []string, track func(*exec.Cmd)) (mcp.Transport, func(), error) {
	return lineRelayDeciding(ctx, argv, env, track, ComponentLineRelay, nil)
}

// lineRelayDeciding is lineRelay whose client-to-server copier asks
// decide about each line first (nil: none), labelled component: a
// refused call is answered to the client (the reply decide returns)
// instead of forwarded.
func lineRelayDeciding(ctx context.Context, argv, env []string, track func(*exec.Cmd), component string, decide func(line []byte) []byte) (mcp.Transport, func(), error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	childIn, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("line relay: %w", err)
	}
	childOut, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("line relay: %w", err)
	}
	toRelay, clientOut, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("line relay: pipe: %w", err)
	}
	clientIn, fromRelay, err := os.Pipe()
	if err != nil {
		_ = toRelay.Close()
		_ = clientOut.Close()
		return nil, nil, fmt.Errorf("line relay: pipe: %w", err)
	}
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{toRelay, clientOut, clientIn, fromRelay} {
			_ = f.Close()
		}
		return nil, nil, fmt.Errorf("line relay: start the tool server: %w", err)
	}
	track(cmd)
	var wg sync.WaitGroup
	toClient := io.Writer(fromRelay)
	var refuse func([]byte) []byte
	if decide != nil {
		w := &lockedWriter{w: fromRelay}
		toClient = w
		refuse = func(line []byte) []byte {
			reply := decide(line)
			if reply != nil {
				_, _ = w.Write(reply)
			}
			return reply
		}
	}
	labelled(ctx, component, func(context.Context) {
		// Each ends at its source's end and closes its destination: the
		// client's close ends the child's stdin, the child's exit the
		// client's stdin.
		wg.Go(func() { copyLinesVia(childIn, toRelay, refuse); _ = childIn.Close(); _ = toRelay.Close() })
		wg.Go(func() { copyLines(toClient, childOut); _ = fromRelay.Close() })
	})
	stop := func() {
		_ = clientOut.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		wg.Wait()
		_ = clientIn.Close()
	}
	return &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, stop, nil
}

// copyLines copies src to dst a whole line at a time, until src ends
// or dst fails.
func copyLines(dst io.Writer, src io.Reader) { copyLinesVia(dst, src, nil) }

// copyLinesVia is copyLines that offers each whole line to take first
// (nil: none), and copies only those it answers nil.
func copyLinesVia(dst io.Writer, src io.Reader, take func([]byte) []byte) {
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: copied in pieces, never
			// taken (the floor's calls are small).
			if _, werr := dst.Write(line); werr != nil {
				return
			}
			continue
		}
		if len(line) > 0 && take != nil && take(line) != nil {
			line = nil
		}
		if len(line) > 0 {
			if _, werr := dst.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// lockedWriter is one writer of the floor relay's client stream, which
// both copiers write (results, and the calls it refuses).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ComponentFloor labels the MCP bench's policy floor in its CPU profile.
const ComponentFloor = "floor"

// floorDecider is what DESIGN.md says an allowed call through fulfiller
// mcp costs over the direct call, and nothing else: "the policy
// decision and two local hops". It decides each tools/call line of the
// raw line relay once, with the policies the front end loads and the
// input the front end gives them (front_end, method, params, the tool
// and its server, the client as proposer), on the relay's own
// goroutine. No engine, record, decision log, metrics or pins: the
// floor under any front end that decides before it forwards.
type floorDecider struct {
	eng    *policies.Engine
	client string
}

// decide is nil for a line to forward, else the reply that refuses it.
func (d *floorDecider) decide(line []byte) []byte {
	if !bytes.Contains(line, []byte(`"tools/call"`)) {
		return nil
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &req) != nil || req.Method != "tools/call" || req.ID == nil {
		return nil
	}
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	_ = json.Unmarshal(req.Params, &call)
	in := &policies.Input{
		FrontEnd: "mcp", Proposal: line, Method: req.Method, Params: req.Params,
		Tool:     &policies.Tool{Name: call.Name, Server: MCPServerName, Arguments: call.Arguments},
		Proposer: &policies.Participant{ID: d.client},
		Now:      time.Now().UTC(),
	}
	dec := d.eng.Decide(context.Background(), in)
	if dec.Action == decision.Fulfill {
		return nil
	}
	res, _ := json.Marshal(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused: " + string(dec.Reason)}}})
	reply, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
	}{"2.0", req.ID, res})
	return append(reply, '\n')
}

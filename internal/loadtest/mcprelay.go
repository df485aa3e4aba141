package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	labelled(ctx, ComponentLineRelay, func(context.Context) {
		// Each ends at its source's end and closes its destination: the
		// client's close ends the child's stdin, the child's exit the
		// client's stdin.
		wg.Go(func() { copyLines(childIn, toRelay); _ = childIn.Close(); _ = toRelay.Close() })
		wg.Go(func() { copyLines(fromRelay, childOut); _ = fromRelay.Close() })
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
func copyLines(dst io.Writer, src io.Reader) {
	r := bufio.NewReaderSize(src, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: copied in pieces.
			if _, werr := dst.Write(line); werr != nil {
				return
			}
			continue
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

package loadtest

import (
	"context"

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

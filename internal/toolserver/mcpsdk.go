package toolserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mewkit/fulfiller/agent"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewMCP is the same tools as an MCP server of the official Go SDK, for
// what speaks MCP itself rather than through a space (fulfiller's MCP
// front end, its tests, demo and bench): each call answers as Serve
// would (a text result, isError for a tool's failure, the JSON-RPC
// error for an *agent.RPCError), and progress notifications, when the
// caller sent a progressToken, come from Tool.Call through Progress.
func NewMCP(impl *mcp.Implementation, tools ...Tool) *mcp.Server {
	s := mcp.NewServer(impl, &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}})
	for _, t := range tools {
		AddMCP(s, t)
	}
	return s
}

// AddMCP adds t to s (replacing the tool of the same name: a fixture's
// rug pull).
func AddMCP(s *mcp.Server, t Tool) {
	def := &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	if t.Annotations != nil {
		var a mcp.ToolAnnotations
		if err := remarshal(t.Annotations, &a); err == nil {
			def.Annotations = &a
		}
	}
	s.AddTool(def, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx = context.WithValue(ctx, progressKey{}, req)
		text, err := t.Call(ctx, req.Params.Arguments)
		if err == nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		}
		if rpcErr, ok := errors.AsType[*agent.RPCError](err); ok {
			return nil, &jsonrpc.Error{Code: int64(rpcErr.Code), Message: rpcErr.Message, Data: rpcErr.Data}
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
	})
}

type progressKey struct{}

// Progress sends a progress notification about the call ctx is of, when
// it runs under NewMCP and its caller sent a progressToken.
func Progress(ctx context.Context, progress, total float64, message string) {
	req, _ := ctx.Value(progressKey{}).(*mcp.CallToolRequest)
	if req == nil {
		return
	}
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return
	}
	_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: progress, Total: total, Message: message})
}

func remarshal(from, to any) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return agent.Unmarshal(raw, to)
}

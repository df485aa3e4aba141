package mcpfront

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Upstream is an MCP server fulfiller stands in front of.
type Upstream struct {
	// Name is the upstream's NAME: tool.server in the policy input, the
	// key of its pins and grants, and /mcp/NAME over HTTP. Empty (the
	// only upstream, over stdio: `fulfiller mcp` without --name): the
	// serverInfo.name the upstream gives at its first start (see
	// serverName); ServeStdio then takes the name "".
	Name string
	// Transport makes a new transport to the upstream each time it is
	// (re)started.
	Transport func() (mcp.Transport, error)
	// What says what the upstream is, for errors and logs.
	What string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// serverName is a NAME made of what an upstream calls itself
// (serverInfo.name): what a NAME may not hold becomes '_'; "upstream"
// when nothing is left.
func serverName(info *mcp.Implementation) string {
	if info == nil {
		return "upstream"
	}
	b := []byte(info.Name)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if name := string(b); nameRE.MatchString(name) {
		return name
	}
	return "upstream"
}

// CommandUpstream is an upstream over stdio: argv is started (again
// after it exits), its stderr goes to stderr (fulfiller's log), never to
// the client.
func CommandUpstream(name string, argv []string, stderr io.Writer) Upstream {
	if stderr == nil {
		stderr = os.Stderr
	}
	return Upstream{Name: name, What: "the command " + strings.Join(argv, " "), Transport: func() (mcp.Transport, error) {
		if len(argv) == 0 {
			return nil, errors.New("no command")
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stderr = stderr
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
	}}
}

// URLUpstream is an upstream over Streamable HTTP, reached with hc (nil:
// an http.Client of its own, upstreamHTTPClient).
func URLUpstream(name, endpoint string, hc *http.Client) Upstream {
	if hc == nil {
		hc = upstreamHTTPClient()
	}
	return Upstream{Name: name, What: endpoint, Transport: func() (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil
	}}
}

// upstreamHTTPClient is the client of an upstream over HTTP: every
// client's calls share its one session, so as many of them are out at
// once as clients wait. http.DefaultClient keeps 2 idle connections per
// host: with more calls out, each answer beyond the second closed its
// connection and the next call dialled a new one (a TCP handshake, a
// TIME_WAIT socket left behind, and under load a port exhausted).
func upstreamHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return &http.Client{Transport: t}
}

// ParseUpstream reads --upstream's NAME=cmd:COMMAND ARGS (split as a
// POSIX shell would, SplitWords) or NAME=URL (http or https).
func ParseUpstream(spec string, stderr io.Writer) (Upstream, error) {
	name, rest, ok := strings.Cut(spec, "=")
	if !ok || !nameRE.MatchString(name) {
		return Upstream{}, fmt.Errorf("--upstream %q: want NAME=cmd:COMMAND ARGS or NAME=URL, NAME of letters, digits, '.', '_' and '-'", spec)
	}
	if line, ok := strings.CutPrefix(rest, "cmd:"); ok {
		argv, err := SplitWords(line)
		if err != nil {
			return Upstream{}, fmt.Errorf("--upstream %s: %w", name, err)
		}
		return CommandUpstream(name, argv, stderr), nil
	}
	u, err := url.Parse(rest)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Upstream{}, fmt.Errorf("--upstream %s: %q is neither cmd:COMMAND nor an http(s) URL", name, rest)
	}
	return URLUpstream(name, rest, nil), nil
}

// upstream is an Upstream at run time: its session (nil while down), the
// server that faces the clients, and the tools it lists.
type upstream struct {
	Upstream
	f      *Front
	client *mcp.Client
	ready  chan struct{} // closed once the first session is up (and server set)

	mu sync.Mutex
	// serverInfo is the serverInfo the clients see, as JSON (set with
	// server, before ready).
	serverInfo json.RawMessage
	cs         *mcp.ClientSession
	wire       *upConn     // cs's connection, when the Front sends calls on it itself (direct)
	http       *httpCaller // cs's calls over Streamable HTTP, when the Front posts them itself
	down       error       // why there is no session
	server     *mcp.Server
	tools      map[string]*mcp.Tool
	digests    map[string]string
	// back is closed when the next session is up (then set nil): what
	// the calls that wait for a restart wait on (sessionFor). Made by
	// the first of them while there is no session.
	back chan struct{}
	// schemas are the tools' input schemas and annotations as JSON,
	// made once when listed rather than at every call (tool).
	schemas map[string]toolJSON
}

// restartWait bounds how long a call waits for an upstream that is
// being started again (sessionFor): far longer than a restart's first
// backoff (100ms) and a local server's start take, short enough that a
// client whose upstream does not come back hears so while it waits.
const restartWait = 5 * time.Second

// toolJSON is what input.tool gives of a definition as JSON.
type toolJSON struct{ inputSchema, annotations json.RawMessage }

// session is the live session, or an error naming the upstream.
func (u *upstream) session() (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cs == nil {
		return nil, fmt.Errorf("upstream %s is not running (%v); fulfiller is restarting it", u.Name, u.down)
	}
	return u.cs, nil
}

// sessionFor is the session a tools/call goes out on. While the
// upstream is down (it ended, and supervise starts it again after its
// backoff) the call waits for the restarted session rather than fail
// for a gap of a fraction of a second: until ctx ends or restartWait
// has passed, then an error naming the upstream. The call is not sent
// before there is a session, so it never runs twice.
//
// ended, when not nil, is a session the caller found closed before it
// could send on it (its connection's reader saw the end before
// supervise did): it counts as down, and the call waits for the one
// that replaces it.
func (u *upstream) sessionFor(ctx context.Context, ended *mcp.ClientSession) (*mcp.ClientSession, error) {
	u.mu.Lock()
	cs := u.cs
	u.mu.Unlock()
	if cs != nil && cs != ended {
		return cs, nil
	}
	timer := time.NewTimer(restartWait)
	defer timer.Stop()
	for {
		u.mu.Lock()
		cs, down := u.cs, u.down
		if cs == ended {
			cs = nil
		}
		if cs == nil && u.back == nil {
			u.back = make(chan struct{})
		}
		back := u.back
		u.mu.Unlock()
		if cs != nil {
			return cs, nil
		}
		if down == nil {
			down = errors.New("its connection closed")
		}
		select {
		case <-back:
			// Up again, unless it ended at once: look again.
		case <-ctx.Done():
			return nil, fmt.Errorf("upstream %s is not running (%v); the call ended while fulfiller was restarting it: %w", u.Name, down, context.Cause(ctx))
		case <-timer.C:
			return nil, fmt.Errorf("upstream %s is not running (%v); fulfiller is restarting it, and it did not come back within %s", u.Name, down, restartWait)
		}
	}
}

// supervise keeps a session to the upstream until ctx ends: started,
// and started again with backoff after it ends (a process that exits, a
// server that is unreachable or answers garbage). Calls out on the
// session that ends get an error result naming the upstream (see call).
func (u *upstream) supervise(ctx context.Context) {
	wait := u.f.cfg.BackoffMin
	for {
		started := time.Now()
		err := u.run(ctx)
		if ctx.Err() != nil {
			return
		}
		u.f.log.Warn("mcp upstream ended; restarting", "upstream", u.Name, "what", u.What, "err", err, "after", wait)
		if time.Since(started) > 10*u.f.cfg.BackoffMax {
			wait = u.f.cfg.BackoffMin // it ran well for a while: start over
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, u.f.cfg.BackoffMax)
	}
}

// run connects once and waits for the session to end.
func (u *upstream) run(ctx context.Context) error {
	t, err := u.Transport()
	if err != nil {
		return u.setDown(fmt.Errorf("upstream %s cannot be started: %w", u.Name, err))
	}
	var ut *upTransport
	if directAllowed(t) {
		ut = &upTransport{Transport: t, f: u.f, name: u.Name}
		t = ut
	}
	cctx, cancel := context.WithTimeout(ctx, u.f.cfg.ConnectTimeout)
	cs, err := u.client.Connect(cctx, t, nil)
	cancel()
	if err != nil {
		return u.setDown(fmt.Errorf("upstream %s (%s) did not start: %w", u.Name, u.What, err))
	}
	stop := context.AfterFunc(ctx, func() { _ = cs.Close() })
	defer stop()
	if u.Name == "" {
		// Named once, before anything is keyed by the name (its pins)
		// and before ready: the clients' handlers read it after.
		u.Name = serverName(cs.InitializeResult().ServerInfo)
		u.f.log.Info("mcp upstream named after its serverInfo", "upstream", u.Name, "what", u.What)
	}
	if err := u.refreshTools(ctx, cs); err != nil {
		_ = cs.Close()
		return u.setDown(err)
	}
	u.mu.Lock()
	first := u.server == nil
	if first {
		u.server = u.f.newServer(u, cs.InitializeResult())
	}
	u.cs, u.down = cs, nil
	u.http = newHTTPCaller(u, t, cs)
	if ut != nil {
		// The Front's calls carry the _meta the SDK's carry (SEP-2575),
		// read from its tools/list: without one seen, the SDK calls.
		if _, _, ok := ut.conn.requestMeta(); ok {
			u.wire = ut.conn
		}
	}
	if u.back != nil {
		close(u.back) // the calls waiting for the restart go out on it
		u.back = nil
	}
	u.mu.Unlock()
	if first {
		close(u.ready)
	} else {
		u.listChanged(notifyTools) // what a restarted upstream lists may differ
	}
	err = cs.Wait()
	if u.f.testSessionEnded != nil {
		u.f.testSessionEnded()
	}
	_ = cs.Close() // what the session started (its subscriptions/listen) ends with it
	if err == nil {
		err = errors.New("its connection closed")
	}
	return u.setDown(fmt.Errorf("upstream %s (%s) ended: %w", u.Name, u.What, err))
}

// direct is the connection the Front sends tools/calls on itself
// (upConn), nil when it has none (down, or over HTTP).
func (u *upstream) direct() *upConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.wire
}

func (u *upstream) setDown(err error) error {
	u.mu.Lock()
	u.cs, u.down, u.wire, u.http = nil, err, nil, nil
	u.mu.Unlock()
	return err
}

// httpFor is the caller that posts cs's tools/calls itself, nil when the
// SDK's session makes them (not over HTTP, or a revision it leaves to
// the SDK: newHTTPCaller).
func (u *upstream) httpFor(cs *mcp.ClientSession) *httpCaller {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.http == nil || u.http.cs != cs {
		return nil
	}
	return u.http
}

// refreshTools lists the upstream's tools (every page) and pins them.
func (u *upstream) refreshTools(ctx context.Context, cs *mcp.ClientSession) error {
	if r := cs.InitializeResult(); r == nil || r.Capabilities == nil || r.Capabilities.Tools == nil {
		return nil
	}
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("upstream %s: tools/list: %w", u.Name, err)
		}
		tools = append(tools, t)
	}
	return u.observe(ctx, tools, true)
}

// observe records the definitions listed (all of them when whole, else
// one page), pinning those never seen.
func (u *upstream) observe(ctx context.Context, tools []*mcp.Tool, whole bool) error {
	digests := make(map[string]string, len(tools))
	defs := make(map[string]*mcp.Tool, len(tools))
	schemas := make(map[string]toolJSON, len(tools))
	for _, t := range tools {
		d, err := Digest(t)
		if err != nil {
			return fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		digests[t.Name], defs[t.Name] = d, t
		var j toolJSON
		j.inputSchema, _ = json.Marshal(t.InputSchema)
		if t.Annotations != nil {
			j.annotations, _ = json.Marshal(t.Annotations)
		}
		schemas[t.Name] = j
	}
	pinned, err := u.f.pins.Pin(ctx, u.Name, digests)
	if err != nil {
		return fmt.Errorf("upstream %s: the tool pins cannot be read: %w", u.Name, err)
	}
	for name, d := range digests {
		if p := pinned[name]; p != d {
			u.f.log.Warn("mcp tool definition changed since it was pinned", "upstream", u.Name, "tool", name, "pinned", p, "now", d)
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if whole || u.tools == nil {
		u.tools, u.digests, u.schemas = map[string]*mcp.Tool{}, map[string]string{}, map[string]toolJSON{}
	}
	for name := range defs {
		u.tools[name], u.digests[name], u.schemas[name] = defs[name], digests[name], schemas[name]
	}
	return nil
}

// tool is input.tool for a call of name with args.
func (u *upstream) tool(ctx context.Context, name string, args json.RawMessage) (Tool, error) {
	t := Tool{Name: name, Arguments: args, Server: u.Name}
	u.mu.Lock()
	def, digest, j := u.tools[name], u.digests[name], u.schemas[name]
	u.mu.Unlock()
	if def == nil {
		return t, nil
	}
	t.Listed, t.Description, t.Digest = true, def.Description, digest
	t.InputSchema, t.Annotations = j.inputSchema, j.annotations
	pinned, err := u.f.pins.Pin(ctx, u.Name, map[string]string{name: digest})
	if err != nil {
		return t, fmt.Errorf("upstream %s: the tool pins cannot be read: %w", u.Name, err)
	}
	if p := pinned[name]; p != digest {
		t.Changed = &ToolChange{Old: p, New: digest}
	}
	return t, nil
}

type listKind int

const (
	notifyTools listKind = iota
	notifyPrompts
	notifyResources
)

// placeholder is the name of the feature added and removed at once to
// make the SDK's server send a list_changed notification to every
// session: the SDK sends them only for its own features, and the lists
// themselves are the upstream's (the middleware answers them), so the
// placeholder is never listed.
const placeholder = "fulfiller.list-changed"

// listChanged tells every client that a list changed.
func (u *upstream) listChanged(k listKind) {
	u.mu.Lock()
	s := u.server
	u.mu.Unlock()
	if s == nil {
		return
	}
	switch k {
	case notifyTools:
		s.AddTool(&mcp.Tool{Name: placeholder, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("not a tool")
		})
		s.RemoveTools(placeholder)
	case notifyPrompts:
		s.AddPrompt(&mcp.Prompt{Name: placeholder}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return nil, errors.New("not a prompt")
		})
		s.RemovePrompts(placeholder)
	case notifyResources:
		uri := "fulfiller:" + placeholder
		s.AddResource(&mcp.Resource{URI: uri, Name: placeholder}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, errors.New("not a resource")
		})
		s.RemoveResources(uri)
	}
}

// newClient is the client fulfiller is to the upstream: it hears the
// upstream's notifications and hands them on to the clients.
func (u *upstream) newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "fulfiller", Version: u.f.cfg.Version}, &mcp.ClientOptions{
		Logger: u.f.log,
		// fulfiller declares nothing to the upstream: not the SDK's
		// default roots (an empty list of them would shrink what a
		// server like the filesystem one may touch to nothing), nor
		// sampling or elicitation, which it does not carry to the
		// clients (one upstream session serves them all).
		Capabilities:               &mcp.ClientCapabilities{},
		ToolListChangedHandler:     func(ctx context.Context, r *mcp.ToolListChangedRequest) { u.toolsChanged(ctx, r.Session) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { u.listChanged(notifyPrompts) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { u.listChanged(notifyResources) },
		ResourceUpdatedHandler: func(ctx context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			u.resourceUpdated(ctx, r.Params)
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) { u.logMessage(ctx, r.Params) },
		ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
			u.f.progress(ctx, r.Params)
		},
	})
}

// The upstream's notifications, from the SDK's session or from the
// stream of a call the Front posted itself (httpCaller).

// toolsChanged lists the tools of cs again and tells the clients.
func (u *upstream) toolsChanged(ctx context.Context, cs *mcp.ClientSession) {
	if err := u.refreshTools(ctx, cs); err != nil {
		u.f.log.Warn("mcp upstream's tools could not be listed again", "upstream", u.Name, "err", err)
	}
	u.listChanged(notifyTools)
}

// resourceUpdated hands a resource's update on to the clients.
func (u *upstream) resourceUpdated(ctx context.Context, p *mcp.ResourceUpdatedNotificationParams) {
	u.mu.Lock()
	s := u.server
	u.mu.Unlock()
	if s != nil {
		_ = s.ResourceUpdated(ctx, p)
	}
}

// logMessage hands a log line of the upstream's on to every client.
func (u *upstream) logMessage(ctx context.Context, p *mcp.LoggingMessageParams) {
	u.mu.Lock()
	s := u.server
	u.mu.Unlock()
	if s == nil {
		return
	}
	for ss := range s.Sessions() {
		_ = ss.Log(ctx, p)
	}
}

//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/space"
	"github.com/mewkit/fulfiller/internal/spacetest"
)

// The records fixture of build b7920f5 (testdata/records-b7920f5; its
// README.md says how it was made, fixture_gen_test.go makes it): a
// --state DIR that `fulfiller run` at commit b7920f5 left when it was
// killed with SIGKILL while five proposals were unanswered. Everything
// below is what that run and its resume share: the space, the
// participants and their tokens, the proposal ids, the policy and the
// flags.
const (
	// fixtureDir is the fixture, relative to this package's directory.
	fixtureDir = "testdata/records-b7920f5"
	// fixtureSpace is the space id: the test space's and --space. The
	// store's buckets and streams are named after --space.
	fixtureSpace = "fulfiller-fixture"
	// fixtureMember is --id: the records' owner. A restart under
	// another id would adopt them as a lapsed member's work instead.
	fixtureMember = "fulfiller"
	// fixtureTaskID is the task id the scripted owner "jobs" gave the
	// task of fixtureTask.
	fixtureTaskID = "task-b7920f5-migrate"
	// fixtureResult is what the task returns when it ends (after the
	// resume).
	fixtureResult = `{"content":[{"type":"text","text":"migrated"}]}`
)

// The proposals of the fixture, all from "coder".
const (
	// fixtureQuorum: deploy to fs, escalated to alice and bob with
	// quorum 2; alice approved (recorded), bob's prompt is open.
	fixtureQuorum = "b7920f5-quorum"
	// fixtureInflight: hold to fs, fulfilled at once; its tools/call was
	// written to fs, who has not answered.
	fixtureInflight = "b7920f5-inflight"
	// fixtureTask: migrate to jobs (taskSupport required); jobs answered
	// the task-augmented tools/call with task fixtureTaskID, working.
	fixtureTask = "b7920f5-task"
	// fixtureSingle: remove to fs, escalated to --approvers (carol),
	// quorum 1; carol's prompt is open.
	fixtureSingle = "b7920f5-single"
	// fixtureQueued: write to fs, fulfilled but queued: --max-inflight 1
	// and fixtureInflight holds the one slot.
	fixtureQueued = "b7920f5-queued"
)

// fixturePolicy is the policy the fixture was made with (written to
// policy.rego in the fixture). No decision sets a timeout: every deadline
// comes from the flags, 10 years.
const fixturePolicy = `package fulfiller

# The policy of the records fixture of b7920f5 (cmd/fulfiller/fixture_gen_test.go).
# No decision sets a timeout or task_timeout: the flags give 87600h to all.

# b7920f5-quorum: two approvals, alice's and bob's.
decision := {"action": "escalate", "approvers": ["alice", "bob"], "quorum": 2, "message": "deploy needs alice and bob"} if input.tool.name == "deploy"

# b7920f5-single: one approval, from --approvers (carol).
decision := {"action": "escalate", "message": "remove needs an approval"} if input.tool.name == "remove"

# b7920f5-inflight and b7920f5-queued: fulfilled at once (--max-inflight 1).
decision := {"action": "fulfill"} if input.tool.name in {"hold", "write"}

# b7920f5-task: jobs declares migrate taskSupport "required": called as a task.
decision := {"action": "fulfill"} if input.tool.name == "migrate"
`

// fixtureTokens are the space's tokens, as newBinarySpace's.
var fixtureTokens = map[string][]agent.Capability{
	"fulfiller-token": {{Kind: "mcp/*"}, {Kind: "chat"}},
	"coder-token":     {{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}},
	"human-token":     {{Kind: "mcp/response"}, {Kind: "chat"}},
}

// fixtureArgs are the `fulfiller run` arguments of the fixture's run and
// of its resume: the same flags both times (only --http is added by the
// resume). The token comes from FULFILLER_TOKEN=fulfiller-token.
func fixtureArgs(gateway, policy, state string) []string {
	return []string{"run",
		"--gateway", gateway,
		"--space", fixtureSpace,
		"--id", fixtureMember,
		"--policy", policy,
		"--approvers", "carol",
		"--state", state,
		"--approval-timeout", "87600h",
		"--fulfill-timeout", "87600h",
		"--task-timeout", "87600h",
		"--pending-ttl", "87600h",
		"--seen-ttl", "87600h",
		"--max-inflight", "1",
		"--policy-timeout", "1m",
		"--log-format", "json",
	}
}

// fixtureTools are the tools/list answers of the two tool owners.
var fixtureTools = map[string]string{
	"fs": `{"tools":[` +
		`{"name":"deploy","description":"deploy a version","inputSchema":{"type":"object"}},` +
		`{"name":"hold","description":"answers when its owner decides","inputSchema":{"type":"object"}},` +
		`{"name":"remove","description":"remove a path","inputSchema":{"type":"object"}},` +
		`{"name":"write","description":"write a file","inputSchema":{"type":"object"}}]}`,
	"jobs": `{"tools":[{"name":"migrate","description":"run a migration","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}]}`,
}

// fixtureProposals are the proposals as coder sent them: id, owner and
// tools/call payload.
var fixtureProposals = []struct{ ID, To, Payload string }{
	{fixtureTask, "jobs", `{"method":"tools/call","params":{"name":"migrate","arguments":{"steps":3}}}`},
	{fixtureInflight, "fs", `{"method":"tools/call","params":{"name":"hold","arguments":{"path":"/srv/inflight"}}}`},
	{fixtureQueued, "fs", `{"method":"tools/call","params":{"name":"write","arguments":{"path":"/srv/queued","content":"q"}}}`},
	{fixtureQuorum, "fs", `{"method":"tools/call","params":{"name":"deploy","arguments":{"version":"1.2.3"}}}`},
	{fixtureSingle, "fs", `{"method":"tools/call","params":{"name":"remove","arguments":{"path":"/srv/single"}}}`},
}

// fixtureEnvelope is an envelope of the fixture's run as it was on the wire,
// its payload byte for byte.
type fixtureEnvelope struct {
	ID            string   `json:"id"`
	From          string   `json:"from"`
	To            []string `json:"to,omitempty"`
	Kind          string   `json:"kind"`
	CorrelationID []string `json:"correlation_id,omitempty"`
	Payload       string   `json:"payload"`
	// RPCID is the payload's JSON-RPC id, when it has one.
	RPCID json.RawMessage `json:"rpc_id,omitempty"`
}

func fixtureWireOf(env agent.Envelope) fixtureEnvelope {
	var rpc struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(env.Payload, &rpc)
	return fixtureEnvelope{ID: env.ID, From: env.From, To: env.To, Kind: env.Kind, CorrelationID: env.CorrelationID,
		Payload: string(env.Payload), RPCID: rpc.ID}
}

// fixtureManifest is fixture.json: what the fixture's run sent, for the
// resume to expect (the envelope ids and JSON-RPC ids the fulfiller made
// are its own choice, so they are read from here rather than fixed).
type fixtureManifest struct {
	Commit  string    `json:"commit"`
	Version string    `json:"version"`
	Made    time.Time `json:"made"`
	Space   string    `json:"space"`
	Member  string    `json:"member"`
	// Args are the run's arguments, {gateway}, {policy} and {state}
	// standing for what changes from run to run.
	Args []string `json:"args"`
	// Proposals are coder's proposals, by proposal id.
	Proposals map[string]fixtureEnvelope `json:"proposals"`
	// Prompts are the elicitation/create requests, by "<proposal>/<approver>".
	Prompts map[string]fixtureEnvelope `json:"prompts"`
	// Approvals are the approvers' answers given before the kill, by
	// "<proposal>/<approver>".
	Approvals map[string]fixtureEnvelope `json:"approvals"`
	// Requests are the fulfilment requests (tools/call) written before
	// the kill, by proposal id.
	Requests map[string]fixtureEnvelope `json:"requests"`
	// TaskCreated is jobs' answer to the task-augmented tools/call.
	TaskCreated fixtureEnvelope `json:"task_created"`
	// Pending is what each proposal waits for, by proposal id.
	Pending map[string]string `json:"pending"`
}

func readFixtureManifest(t *testing.T, dir string) fixtureManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "fixture.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m fixtureManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("fixture.json: %v", err)
	}
	return m
}

// fixtureOwner is a scripted tool owner: it answers tools/list with its
// list, tools/call and tasks/get as the test says, and keeps what it was
// asked. A nil answer is no answer.
type fixtureOwner struct {
	c    *agent.Client
	list string

	mu       sync.Mutex
	requests []agent.Envelope
	onCall   func(env agent.Envelope, tool string) (result json.RawMessage)
	onTask   func(method, taskID string) (result json.RawMessage, rpcErr *agent.RPCError)
}

func serveFixtureOwner(t *testing.T, ctx context.Context, c *agent.Client) *fixtureOwner {
	t.Helper()
	o := &fixtureOwner{c: c, list: fixtureTools[c.ID()]}
	sub := c.Subscribe(agent.SubscribeOptions{Kinds: []string{agent.KindRequest}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for env := range sub.C() {
			if !env.AddressedTo(c.ID()) || env.From == c.ID() {
				continue
			}
			o.handle(ctx, env)
		}
	}()
	t.Cleanup(func() { sub.Close(); <-done })
	return o
}

func (o *fixtureOwner) set(onCall func(agent.Envelope, string) json.RawMessage, onTask func(string, string) (json.RawMessage, *agent.RPCError)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.onCall, o.onTask = onCall, onTask
}

// asked lists the requests of method it received.
func (o *fixtureOwner) asked(method string) []agent.Envelope {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []agent.Envelope
	for _, env := range o.requests {
		var req agent.RPCRequest
		if json.Unmarshal(env.Payload, &req) == nil && req.Method == method {
			out = append(out, env)
		}
	}
	return out
}

func (o *fixtureOwner) handle(ctx context.Context, env agent.Envelope) {
	var req agent.RPCRequest
	if json.Unmarshal(env.Payload, &req) != nil {
		return
	}
	o.mu.Lock()
	o.requests = append(o.requests, env)
	onCall, onTask := o.onCall, o.onTask
	o.mu.Unlock()
	if req.ID == nil {
		return // a notification
	}
	var result json.RawMessage
	var rpcErr *agent.RPCError
	switch req.Method {
	case agent.MethodToolsList:
		result = json.RawMessage(o.list)
	case agent.MethodToolsCall:
		var p struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if onCall == nil {
			return
		}
		if result = onCall(env, p.Name); result == nil {
			return
		}
	case "tasks/get", "tasks/cancel", "tasks/result":
		var p struct {
			TaskID string `json:"taskId"`
		}
		_ = json.Unmarshal(req.Params, &p)
		if onTask == nil {
			return
		}
		if result, rpcErr = onTask(req.Method, p.TaskID); result == nil && rpcErr == nil {
			return
		}
	default:
		rpcErr = &agent.RPCError{Code: -32601, Message: "Method not found: " + req.Method}
	}
	resp := agent.RPCResponse{JSONRPC: "2.0", ID: req.ID, Result: result, Error: rpcErr}
	_, _ = o.c.Send(ctx, agent.Envelope{To: []string{env.From}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{env.ID}, Payload: agent.MustPayload(resp)})
}

// fixtureTaskView is task fixtureTaskID in the tasks extension's shape
// (2026-07-28), as jobs answers: resultType "task" makes the
// CreateTaskResult, "complete" a tasks/get answer; result, when set, is
// the completed task's.
func fixtureTaskView(resultType, status string, created time.Time, result string) json.RawMessage {
	v := map[string]any{"resultType": resultType, "taskId": fixtureTaskID, "status": status,
		"createdAt":     created.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		"lastUpdatedAt": created.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		"ttlMs":         (87600 * time.Hour).Milliseconds(), "pollIntervalMs": 1000}
	if result != "" {
		v["result"] = json.RawMessage(result)
	}
	return agent.MustPayload(v)
}

// fixtureApprove answers an elicitation/create as an approver's client does:
// accept, approve true, to the elicitation's envelope id and JSON-RPC id.
func fixtureApprove(t *testing.T, ctx context.Context, approver *agent.Client, elicitation fixtureEnvelope) agent.Envelope {
	t.Helper()
	payload := `{"jsonrpc":"2.0","id":` + string(elicitation.RPCID) + `,"result":{"action":"accept","content":{"approve":true}}}`
	sent, err := approver.Send(ctx, agent.Envelope{To: []string{elicitation.From}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{elicitation.ID}, Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return sent
}

// fixtureOutcome is how a proposal settled for an SDK proposer.
type fixtureOutcome struct {
	Request  agent.Envelope // the fulfilment request it took
	Response agent.Envelope // the mcp/response that resolved it
	Reject   agent.Envelope
}

// fixtureProposer settles proposals as the reference SDK's MEWParticipant
// does (docs/tasks.md): an mcp/request whose correlation_id[0] is a
// pending proposal (not an elicitation) is that proposal's fulfilment;
// the first mcp/response correlated to such a request resolves it; an
// mcp/reject correlated to the proposal fails it. It remembers what it
// learnt before the fulfiller's crash (it did not crash): remember
// seeds it.
type fixtureProposer struct {
	mu       sync.Mutex
	pending  map[string]bool           // proposal ids not settled
	requests map[string]string         // fulfilment request envelope id -> proposal
	taken    map[string]agent.Envelope // proposal -> its fulfilment request
	outcomes map[string]fixtureOutcome
}

func newFixtureProposer(t *testing.T, c *agent.Client, proposals ...string) *fixtureProposer {
	p := &fixtureProposer{pending: map[string]bool{}, requests: map[string]string{}, taken: map[string]agent.Envelope{}, outcomes: map[string]fixtureOutcome{}}
	for _, id := range proposals {
		p.pending[id] = true
	}
	sub := c.Subscribe(agent.SubscribeOptions{All: true})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for env := range sub.C() {
			p.observe(env)
		}
	}()
	t.Cleanup(func() { sub.Close(); <-done })
	return p
}

// remember is a fulfilment request seen before (before the crash).
func (p *fixtureProposer) remember(proposal string, req agent.Envelope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests[req.ID] = proposal
	p.taken[proposal] = req
}

func (p *fixtureProposer) observe(env agent.Envelope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch env.Kind {
	case agent.KindRequest:
		id := env.CorrelationID.First()
		if !p.pending[id] {
			return
		}
		if _, ok := p.taken[id]; ok {
			return
		}
		var req agent.RPCRequest
		if json.Unmarshal(env.Payload, &req) == nil && req.Method != agent.MethodElicitationCreate {
			p.requests[env.ID] = id
			p.taken[id] = env
		}
	case agent.KindResponse:
		id, ok := p.requests[env.CorrelationID.First()]
		if ok && p.pending[id] {
			delete(p.pending, id)
			p.outcomes[id] = fixtureOutcome{Request: p.taken[id], Response: env}
		}
	case agent.KindReject:
		id := env.CorrelationID.First()
		if p.pending[id] {
			delete(p.pending, id)
			p.outcomes[id] = fixtureOutcome{Reject: env}
		}
	}
}

// wait returns how proposal settled.
func (p *fixtureProposer) wait(t *testing.T, proposal string) fixtureOutcome {
	t.Helper()
	var out fixtureOutcome
	poll.Until(t, proposal+" settled for the proposer", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		var ok bool
		out, ok = p.outcomes[proposal]
		return ok
	})
	return out
}

// settled reports whether proposal settled by now.
func (p *fixtureProposer) settled(proposal string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.outcomes[proposal]
	return ok
}

// fixtureCopyDir copies the directory tree src to dst (created 0700, as the
// store makes its DIR; files keep their modes).
func fixtureCopyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm()|0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// fixtureOperatorToken is the operator API's token of the runs
// (FULFILLER_HTTP_TOKEN; --http 127.0.0.1:0).
const fixtureOperatorToken = "fixture-operator"

// fixtureOperatorGet is GET path of the operator API at addr: the body of a 200.
func fixtureOperatorGet(addr, path string) ([]byte, error) {
	time.Sleep(20 * time.Millisecond) // polled: leave the fulfiller some room
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+fixtureOperatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %s", path, resp.Status, body)
	}
	return body, nil
}

// fixtureOperatorList is GET /v1/proposals: proposal id -> its view.
func fixtureOperatorList(addr string) (map[string]map[string]any, error) {
	body, err := fixtureOperatorGet(addr, "/v1/proposals")
	if err != nil {
		return nil, err
	}
	var l struct {
		Proposals []map[string]any `json:"proposals"`
		Warning   string           `json:"warning"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, err
	}
	if l.Warning != "" {
		return nil, fmt.Errorf("GET /v1/proposals: warning %q", l.Warning)
	}
	out := map[string]map[string]any{}
	for _, p := range l.Proposals {
		id, _ := p["id"].(string)
		out[id] = p
	}
	return out, nil
}

// fixtureLogValue finds the first JSON log line with msg and returns its key.
func fixtureLogValue(logs, msg, key string) (string, bool) {
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		if v, ok := m[key].(string); ok {
			return v, true
		}
	}
	return "", false
}

// TestResumeRecordsOfB7920f5: the pending records that `fulfiller run`
// at commit b7920f5 left in its --state DIR when it was killed with
// SIGKILL (testdata/records-b7920f5) are resumed by this build, with the
// outcome and the exact envelopes users rely on:
//
//   - b7920f5-quorum (quorum 2, alice's approval recorded, bob's prompt
//     open): bob is asked again with the same elicitation envelope id,
//     JSON-RPC id and payload bytes; his approval makes the call go out
//     to fs exactly once, and coder gets fs's response;
//   - b7920f5-inflight (tools/call written to fs, unanswered): the
//     request is not written again; fs's answer to the recorded request
//     (correlation_id = its envelope id, the same JSON-RPC id) settles
//     the proposal for coder, and the fulfiller ends it;
//   - b7920f5-task (task of jobs, working): followed again with
//     tasks/get of the same task (correlated to the recorded tools/call),
//     never called again; its result is relayed to coder;
//   - b7920f5-single (quorum 1, carol's prompt open): as quorum;
//   - b7920f5-queued (waiting for the slot): its call goes out once and
//     its response reaches coder.
//
// FULFILLER_RESUME_STATE=DIR resumes DIR instead of the fixture's state
// (an empty DIR must make this test fail: the records are the test).
// FULFILLER_RESUME_SEEN_TTL=D runs the resume with --seen-ttl D instead
// of the fixture's 87600h (1s: the seen log's entries have expired, as
// they have with the default 24h once the fixture is a day old).
func TestResumeRecordsOfB7920f5(t *testing.T) {
	t.Parallel() // the fulfiller as a process of its own: mostly waiting
	bin := fulfillerBinary(t)
	m := readFixtureManifest(t, fixtureDir)
	src := filepath.Join(fixtureDir, "state")
	if d := os.Getenv("FULFILLER_RESUME_STATE"); d != "" {
		src = d
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := fixtureCopyDir(src, dir); err != nil {
		t.Fatalf("copy the fixture's state: %v", err)
	}
	for _, k := range []string{fixtureQuorum + "/bob", fixtureQuorum + "/alice", fixtureSingle + "/carol"} {
		if _, ok := m.Prompts[k]; !ok {
			t.Fatalf("fixture.json has no prompt %s", k)
		}
	}
	for _, k := range []string{fixtureInflight, fixtureTask} {
		if _, ok := m.Requests[k]; !ok {
			t.Fatalf("fixture.json has no request of %s", k)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := space.New(space.Config{SpaceID: fixtureSpace, Tokens: fixtureTokens})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	wire := spacetest.RecordWire(t, srv)

	// The tool owners: fs runs what comes (hold never should), jobs
	// still runs the task, and tells its end when the test lets it.
	fsOwner := serveFixtureOwner(t, ctx, spacetest.Join(t, ctx, srv, "fs", "human-token"))
	fsOwner.set(func(_ agent.Envelope, tool string) json.RawMessage {
		if tool == "hold" {
			return nil // written again: counted below, never answered
		}
		return json.RawMessage(`{"content":[{"type":"text","text":"` + tool + ` ran"}]}`)
	}, nil)
	jobs := serveFixtureOwner(t, ctx, spacetest.Join(t, ctx, srv, "jobs", "human-token"))
	created := time.Time{}
	if m.TaskCreated.Payload != "" {
		var r struct {
			Result struct {
				CreatedAt time.Time `json:"createdAt"`
			} `json:"result"`
		}
		_ = json.Unmarshal([]byte(m.TaskCreated.Payload), &r)
		created = r.Result.CreatedAt
	}
	taskDone := make(chan struct{})
	jobs.set(func(agent.Envelope, string) json.RawMessage {
		return nil // a second tools/call of migrate: counted below, never answered
	}, func(method, taskID string) (json.RawMessage, *agent.RPCError) {
		if taskID != fixtureTaskID || method != "tasks/get" {
			return nil, &agent.RPCError{Code: -32602, Message: "Failed to retrieve task: Task not found"}
		}
		select {
		case <-taskDone:
			return fixtureTaskView("complete", "completed", created, fixtureResult), nil
		default:
			return fixtureTaskView("complete", "working", created, ""), nil
		}
	})
	alice := spacetest.Join(t, ctx, srv, "alice", "human-token")
	bob := spacetest.Join(t, ctx, srv, "bob", "human-token")
	carol := spacetest.Join(t, ctx, srv, "carol", "human-token")
	coder := spacetest.Join(t, ctx, srv, "coder", "coder-token")
	ids := []string{fixtureQuorum, fixtureInflight, fixtureTask, fixtureSingle, fixtureQueued}
	prop := newFixtureProposer(t, coder, ids...)
	// What coder's SDK learnt before the crash: the tools/call of
	// inflight is its fulfilment request. (The task's request names no
	// proposal, and the others had none.)
	inflightReq := m.Requests[fixtureInflight]
	prop.remember(fixtureInflight, agent.Envelope{ID: inflightReq.ID, From: inflightReq.From, To: inflightReq.To,
		Kind: inflightReq.Kind, CorrelationID: inflightReq.CorrelationID, Payload: json.RawMessage(inflightReq.Payload)})

	policy := filepath.Join(fixtureDir, "policy.rego")
	if abs, err := filepath.Abs(policy); err == nil {
		policy = abs
	}
	args := append(fixtureArgs(srv.URL(), policy, dir), "--http", "127.0.0.1:0")
	if ttl := os.Getenv("FULFILLER_RESUME_SEEN_TTL"); ttl != "" {
		// The seen log's entries are as old as the fixture: a --seen-ttl
		// shorter than that (1s, or the default 24h once the fixture is a
		// day old) drops them when the store opens, and the resume writes
		// them again (state's Reclaim).
		args[slices.Index(args, "--seen-ttl")+1] = ttl
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir() // no default state dir in the source
	cmd.Env = append(os.Environ(), "FULFILLER_TOKEN=fulfiller-token", "FULFILLER_HTTP_TOKEN="+fixtureOperatorToken)
	var logs logbuf.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	defer func() {
		if t.Failed() {
			t.Logf("fulfiller logs:\n%s", logs.String())
		}
	}()
	var addr string
	poll.Until(t, "the operator API's address in the log", func() bool {
		addr, _ = fixtureLogValue(logs.String(), "serving health, metrics and the operator API", "addr")
		return addr != ""
	})

	// The records were read: every proposal but the queued one (which may
	// have had the free slot at once, and be answered already) is pending
	// here, in the phase it was left in.
	want := map[string]string{fixtureQuorum: "awaiting_approval", fixtureSingle: "awaiting_approval", fixtureInflight: "fulfilling", fixtureTask: "task"}
	var listed map[string]map[string]any
	var listErr error
	if !poll.Within(30*time.Second, func() bool {
		listed, listErr = fixtureOperatorList(addr)
		if listErr != nil {
			return false
		}
		for id, state := range want {
			if listed[id] == nil || listed[id]["state"] != state {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the fixture's proposals are not pending after the restart: %v %v, want %v", listed, listErr, want)
	}
	if task, _ := listed[fixtureTask]["task"].(map[string]any); task == nil || task["id"] != fixtureTaskID {
		t.Errorf("%s listed with task %v, want id %s", fixtureTask, listed[fixtureTask]["task"], fixtureTaskID)
	}
	for _, id := range []string{fixtureQuorum, fixtureSingle, fixtureInflight, fixtureTask} {
		if d, _ := listed[id]["deadline"].(string); id != fixtureTask && id != fixtureInflight && !strings.HasPrefix(d, "20") {
			t.Errorf("%s listed with deadline %q", id, d)
		}
	}

	// (a) and (d): the open prompts are asked again, the same envelope id,
	// JSON-RPC id and payload bytes as before the crash.
	reasked := func(key string) agent.Envelope {
		rec := m.Prompts[key]
		env := wire.WaitFor(t, "the prompt "+key+" asked again", func(e agent.Envelope) bool {
			return e.Kind == agent.KindRequest && e.ID == rec.ID
		})
		var req agent.RPCRequest
		_ = json.Unmarshal(env.Payload, &req)
		if env.From != fixtureMember || !slices.Equal(env.To, rec.To) || string(req.ID) != string(rec.RPCID) || req.Method != agent.MethodElicitationCreate {
			t.Errorf("%s asked again from %s to %v with JSON-RPC id %s method %s; want from %s to %v id %s elicitation/create",
				key, env.From, env.To, req.ID, req.Method, fixtureMember, rec.To, rec.RPCID)
		}
		if string(env.Payload) != rec.Payload {
			t.Errorf("%s asked again with other bytes:\n got %s\nwant %s", key, env.Payload, rec.Payload)
		}
		return env
	}
	bobAgain := reasked(fixtureQuorum + "/bob")
	carolAgain := reasked(fixtureSingle + "/carol")

	// (b) the fulfilment in flight: fs answers the recorded request.
	fsAnswer, err := fsOwner.c.Send(ctx, agent.Envelope{To: []string{fixtureMember}, Kind: agent.KindResponse,
		CorrelationID: agent.CorrelationIDs{inflightReq.ID},
		Payload:       json.RawMessage(`{"jsonrpc":"2.0","id":` + string(inflightReq.RPCID) + `,"result":{"content":[{"type":"text","text":"hold ran"}]}}`)})
	if err != nil {
		t.Fatal(err)
	}
	out := prop.wait(t, fixtureInflight)
	if out.Response.ID != fsAnswer.ID || out.Request.ID != inflightReq.ID {
		t.Errorf("%s settled by %+v, want fs's answer %s to the recorded request %s", fixtureInflight, out, fsAnswer.ID, inflightReq.ID)
	}
	poll.Until(t, fixtureInflight+" ended at the fulfiller", func() bool {
		l, err := fixtureOperatorList(addr)
		return err == nil && l[fixtureInflight] == nil
	})

	// (c) the task: followed again, then relayed.
	wire.WaitFor(t, "tasks/get of the fixture's task after the restart", func(e agent.Envelope) bool {
		return e.From == fixtureMember && slices.Equal(e.To, []string{"jobs"}) && e.Kind == agent.KindRequest &&
			e.CorrelationID.First() == m.Requests[fixtureTask].ID &&
			strings.Contains(string(e.Payload), `"method":"tasks/get"`) && strings.Contains(string(e.Payload), `"taskId":"`+fixtureTaskID+`"`)
	})
	close(taskDone)
	out = prop.wait(t, fixtureTask)
	if out.Reject.ID != "" || out.Request.From != fixtureMember || !slices.Equal(out.Request.To, []string{fixtureMember}) ||
		!strings.Contains(string(out.Request.Payload), `"method":"tasks/result"`) || !strings.Contains(string(out.Request.Payload), fixtureTaskID) {
		t.Errorf("%s settled by request %s %v %s (reject %s), want the relay's tasks/result from and to %s", fixtureTask,
			out.Request.From, out.Request.To, out.Request.Payload, out.Reject.Payload, fixtureMember)
	}
	var relayed agent.RPCResponse
	if err := json.Unmarshal(out.Response.Payload, &relayed); err != nil || string(relayed.Result) != fixtureResult ||
		out.Response.From != fixtureMember || !slices.Equal(out.Response.To, []string{"coder"}) {
		t.Errorf("%s relayed as %s from %s to %v, want result %s from %s to coder", fixtureTask, out.Response.Payload,
			out.Response.From, out.Response.To, fixtureResult, fixtureMember)
	}

	// The queued proposal goes out once the slot is free.
	out = prop.wait(t, fixtureQueued)
	checkCall := func(id, tool string, out fixtureOutcome) {
		t.Helper()
		var resp agent.RPCResponse
		_ = json.Unmarshal(out.Response.Payload, &resp)
		if out.Reject.ID != "" || out.Request.From != fixtureMember || !slices.Equal(out.Request.To, []string{"fs"}) ||
			!strings.Contains(string(out.Request.Payload), `"name":"`+tool+`"`) || out.Response.From != "fs" ||
			string(resp.Result) != `{"content":[{"type":"text","text":"`+tool+` ran"}]}` {
			t.Errorf("%s settled by request %s→%v %s, response %s from %s (reject %s); want the %s call to fs and its result",
				id, out.Request.From, out.Request.To, out.Request.Payload, out.Response.Payload, out.Response.From, out.Reject.Payload, tool)
		}
	}
	checkCall(fixtureQueued, "write", out)

	// (a) bob's approval (alice's is in the record) makes the call.
	if prop.settled(fixtureQuorum) {
		t.Fatalf("%s settled before bob answered", fixtureQuorum)
	}
	fixtureApprove(t, ctx, bob, fixtureWireOf(bobAgain))
	checkCall(fixtureQuorum, "deploy", prop.wait(t, fixtureQuorum))
	// (d) carol's approval.
	fixtureApprove(t, ctx, carol, fixtureWireOf(carolAgain))
	checkCall(fixtureSingle, "remove", prop.wait(t, fixtureSingle))

	poll.Until(t, "nothing pending at the fulfiller", func() bool {
		l, err := fixtureOperatorList(addr)
		return err == nil && len(l) == 0
	})
	// Exactly once: one tools/call each (none again for inflight and the
	// task), no reject, nothing more asked of alice.
	time.Sleep(300 * time.Millisecond)
	calls := map[string]int{}
	for _, env := range fsOwner.asked(agent.MethodToolsCall) {
		var req struct {
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(env.Payload, &req)
		calls[req.Params.Name]++
	}
	if want := map[string]int{"write": 1, "deploy": 1, "remove": 1}; !fixtureMapsEqual(calls, want) {
		t.Errorf("fs was called %v after the restart, want %v (hold never again)", calls, want)
	}
	if n := len(jobs.asked(agent.MethodToolsCall)); n != 0 {
		t.Errorf("jobs was called %d times after the restart, want 0 (the task runs)", n)
	}
	for _, env := range wire.Envelopes() {
		if env.Kind == agent.KindReject && slices.Contains(ids, env.CorrelationID.First()) {
			t.Errorf("a reject on the wire after the restart: %s %s", env.CorrelationID.First(), env.Payload)
		}
		if env.From == fixtureMember && slices.Equal(env.To, []string{"alice"}) && bytes.Contains(env.Payload, []byte(`"elicitation/create"`)) {
			t.Errorf("alice, whose approval is recorded, was asked again: %s %s", env.ID, env.Payload)
		}
	}
	_ = alice
}

func fixtureMapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

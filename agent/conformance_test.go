package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// The recorded traffic of the reference gateway, kept in the repository;
// see its README.
const conformanceDir = "../testdata/conformance/mew-v0.4"

func conformanceLines(t *testing.T, name string) [][]byte {
	t.Helper()
	if _, err := os.Stat(conformanceDir); errors.Is(err, os.ErrNotExist) {
		testenv.Missing(t, "conformance recordings not found at %s (they are part of the repository)", conformanceDir)
	}
	f, err := os.Open(filepath.Join(conformanceDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// conformanceEnvelopes decodes every line of a file that holds only
// envelopes.
func conformanceEnvelopes(t *testing.T, name string) []Envelope {
	t.Helper()
	var out []Envelope
	for i, line := range conformanceLines(t, name) {
		env, err := Decode(line)
		if err != nil {
			t.Fatalf("%s:%d: %v", name, i+1, err)
		}
		out = append(out, env)
	}
	return out
}

// transcriptRecord is one line of transcript.jsonl: a wrapper around a frame.
type transcriptRecord struct {
	Seq     int             `json:"seq"`
	Scene   string          `json:"scene"`
	Dir     string          `json:"dir"`
	Via     string          `json:"via"`
	NonJSON bool            `json:"non_json"`
	Binary  bool            `json:"ws_binary_frame"`
	Frame   json.RawMessage `json:"frame"`
}

// Skip reasons: every recorded line either decodes as an envelope or is one
// of these.
const (
	skipHTTPRecord = "http exchange record, not a frame"
	skipBinary     = "binary stream data"
	skipNonJSON    = "non-JSON text a client sent"
	skipJoin       = "join frame a client sent"
	skipUnstamped  = "client frame before gateway normalisation"
)

func TestConformanceEveryLineDecodesOrIsSkipped(t *testing.T) {
	if _, err := os.Stat(conformanceDir); errors.Is(err, os.ErrNotExist) {
		testenv.Missing(t, "conformance recordings not found at %s (they are part of the repository)", conformanceDir)
	}
	names, err := filepath.Glob(filepath.Join(conformanceDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, filepath.Join(conformanceDir, "stream-frames.raw.txt"))
	decoded := map[string]int{}
	skipped := map[string]int{}
	for _, path := range names {
		name := filepath.Base(path)
		for i, line := range conformanceLines(t, name) {
			where := name + ":" + strconv.Itoa(i+1)
			switch {
			case name == "http-responses.jsonl":
				var rec struct{ Scene, Request, Response json.RawMessage }
				if err := json.Unmarshal(line, &rec); err != nil || rec.Request == nil || rec.Response == nil {
					t.Fatalf("%s: not an HTTP record: %v", where, err)
				}
				if _, err := Decode(line); !errors.Is(err, ErrNotEnvelope) {
					t.Fatalf("%s: Decode accepted an HTTP record: %v", where, err)
				}
				skipped[skipHTTPRecord]++
			case name == "transcript.jsonl":
				reason, env, ok := classifyTranscript(t, where, line)
				if !ok {
					skipped[reason]++
					continue
				}
				decoded[name+" "+reason]++
				checkRoundTrip(t, where, env)
			case bytes.HasPrefix(line, []byte("#")):
				skipped[skipBinary]++
			default:
				env, err := Decode(line)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				decoded[name]++
				checkRoundTrip(t, where, env)
			}
		}
	}
	equal(t, "decoded", decoded, map[string]int{
		"capability-grant.jsonl": 6, "capability-violation.jsonl": 8, "duplicate-session.jsonl": 4,
		"handshake-variants.jsonl": 17, "http-injection.jsonl": 4, "malformed-input.jsonl": 10,
		"normalisation.jsonl": 6, "presence.jsonl": 17, "proposal-flow.jsonl": 31,
		"proposal-flow.calculator.jsonl": 31, "proposal-flow.fulfiller.jsonl": 31, "proposal-flow.human.jsonl": 31,
		"proposal-flow.proposer.jsonl": 31, "rejoin-same-socket.jsonl": 5, "system-kinds.jsonl": 4,
		"welcome.jsonl": 5, "stream-frames.raw.txt": 7, "sdk-bridge.jsonl": 11,
		"transcript.jsonl recv": 432, "transcript.jsonl sent": 53,
	})
	equal(t, "skipped", skipped, map[string]int{
		skipHTTPRecord: 12, skipBinary: 1 + 6, skipNonJSON: 4, skipJoin: 16, skipUnstamped: 19,
	})
}

// classifyTranscript unwraps one transcript line. Everything a client
// received must decode; what clients sent may be a join frame, junk sent on
// purpose, or an envelope the gateway had yet to stamp.
func classifyTranscript(t *testing.T, where string, line []byte) (string, Envelope, bool) {
	t.Helper()
	var rec transcriptRecord
	if err := json.Unmarshal(line, &rec); err != nil || rec.Seq == 0 || rec.Frame == nil {
		t.Fatalf("%s: not a transcript record: %v", where, err)
	}
	if rec.NonJSON {
		var s string
		if err := json.Unmarshal(rec.Frame, &s); err != nil {
			t.Fatalf("%s: non-JSON frame is not recorded as a string: %v", where, err)
		}
		if rec.Binary {
			if !strings.HasPrefix(s, "#") || rec.Dir != "recv" {
				t.Fatalf("%s: unexpected binary frame %q", where, s)
			}
			return skipBinary, Envelope{}, false
		}
		if rec.Dir != "sent" {
			t.Fatalf("%s: a client received non-JSON text %q", where, s)
		}
		return skipNonJSON, Envelope{}, false
	}
	env, err := Decode(rec.Frame)
	if rec.Dir == "recv" {
		if err != nil {
			t.Fatalf("%s: received frame does not decode: %v", where, err)
		}
		return "recv", env, true
	}
	if err == nil {
		return "sent", env, true
	}
	var join struct {
		Type string `json:"type"`
		Kind string `json:"kind"`
	}
	if json.Unmarshal(rec.Frame, &join) == nil && (join.Type == "join" || join.Kind == "system/join") {
		return skipJoin, Envelope{}, false
	}
	return skipUnstamped, Envelope{}, false
}

// checkRoundTrip encodes a decoded envelope and decodes it again: nothing
// fulfiller reads may be lost on the way out.
func checkRoundTrip(t *testing.T, where string, env Envelope) {
	t.Helper()
	out, err := Encode(env)
	if err != nil {
		t.Fatalf("%s: encode: %v", where, err)
	}
	back, err := Decode(out)
	if err != nil {
		t.Fatalf("%s: decode of re-encoded: %v", where, err)
	}
	norm := func(e Envelope) Envelope {
		e.Raw = nil
		if len(e.To) == 0 {
			e.To = nil // to:[] means everyone, like no to
		}
		return e
	}
	if !reflect.DeepEqual(norm(back), norm(env)) {
		t.Fatalf("%s: round trip changed the envelope:\n got %+v\nwant %+v", where, norm(back), norm(env))
	}
}

var baseline = Capability{ID: "mcp-response", Kind: "mcp/response"}

// replay feeds envelopes through a fresh state for self, dropping own
// echoes as the Client does.
func replay(self string, envs []Envelope) (*spaceState, []effect) {
	st := newSpaceState(self)
	var effs []effect
	for i := range envs {
		if envs[i].From == self {
			continue
		}
		effs = append(effs, st.observe(&envs[i]))
	}
	return st, effs
}

func TestConformancePresenceRoster(t *testing.T) {
	envs := conformanceEnvelopes(t, "presence.jsonl")
	st, _ := replay("observer", envs[:4])
	equal(t, "after the four joins", ids(st.roster()), []string{"calculator", "fulfiller", "human", "proposer"})

	st, effs := replay("observer", envs)
	for i, e := range effs {
		if e != (effect{}) {
			t.Fatalf("presence %d had effect %+v", i, e)
		}
	}
	// The gateway never announces the re-joined socket's first id leaving.
	equal(t, "final roster", st.roster(), []Participant{{ID: "rejoin-a", Capabilities: []Capability{
		{Kind: "mcp/response"}, {Kind: "chat"}, {Kind: "mcp/request"}, baseline}}})
}

func TestConformanceWelcomes(t *testing.T) {
	envs := conformanceEnvelopes(t, "welcome.jsonl")
	want := map[string]struct {
		caps   []Capability
		others []string
	}{
		"observer":   {[]Capability{{Kind: "chat"}, baseline}, []string{}},
		"fulfiller":  {[]Capability{{Kind: "mcp/*"}, {Kind: "chat"}, {Kind: "system/*"}, baseline}, []string{"observer"}},
		"proposer":   {[]Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}, baseline}, []string{"fulfiller", "observer"}},
		"calculator": {[]Capability{{Kind: "mcp/response"}, {Kind: "chat"}, baseline}, []string{"fulfiller", "observer", "proposer"}},
		"human":      {[]Capability{{Kind: "mcp/response"}, {Kind: "chat"}, {Kind: "mcp/request"}, baseline}, []string{"calculator", "fulfiller", "observer", "proposer"}},
	}
	for _, env := range envs {
		self := env.To[0]
		// Every participant sees all five welcomes; only its own counts.
		st, effs := replay(self, envs)
		welcomed := 0
		for _, e := range effs {
			if e.welcome {
				welcomed++
			}
		}
		if welcomed != 1 {
			t.Fatalf("%s took %d welcomes", self, welcomed)
		}
		equal(t, self+" capabilities", st.caps, want[self].caps)
		equal(t, self+" roster", ids(st.roster()), want[self].others)
	}
	st, _ := replay("fulfiller", envs)
	equal(t, "fulfiller's last capability", st.caps[len(st.caps)-1], baseline)
	if !Permits(st.caps, KindRequest, nil) || !Permits(st.caps, KindReject, nil) {
		t.Fatal("fulfiller may not request or reject")
	}
	st, _ = replay("proposer", envs)
	if Permits(st.caps, KindRequest, nil) || !Permits(st.caps, KindProposal, nil) {
		t.Fatal("proposer capabilities wrong")
	}
	if p, ok := st.participant("observer"); !ok || p.ID != "observer" {
		t.Fatalf("proposer does not know the observer: %+v", p)
	}
}

func TestConformanceCapabilityGrant(t *testing.T) {
	envs := conformanceEnvelopes(t, "capability-grant.jsonl")
	st, effs := replay("proposer", envs)
	// welcome, presence, welcome-update, grant, error (own request dropped).
	equal(t, "effects", effs, []effect{{welcome: true}, {}, {welcome: true}, {}, {}})
	equal(t, "capabilities after grant", st.caps, []Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}, baseline,
		{Kind: "mcp/request", Payload: map[string]any{"method": "tools/list"}}})
	equal(t, "roster", ids(st.roster()), []string{"admin"})
	if !Permits(st.caps, KindRequest, json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)) ||
		Permits(st.caps, KindRequest, json.RawMessage(`{"jsonrpc":"2.0","id":2,"method":"tools/call"}`)) {
		t.Fatal("granted payload pattern not applied")
	}
}

func TestConformanceSessionGone(t *testing.T) {
	envs := conformanceEnvelopes(t, "duplicate-session.jsonl")
	_, effs := replay("dup", envs)
	if !effs[0].welcome || effs[3].lost == "" {
		t.Fatalf("effects = %+v", effs)
	}
	var p ErrorPayload
	if err := json.Unmarshal(envs[3].Payload, &p); err != nil {
		t.Fatal(err)
	}
	equal(t, "payload", p, ErrorPayload{Error: ErrorCapabilityViolation, AttemptedKind: "chat", YourCapabilities: []Capability{}})

	// Ordinary violations and other errors leave the session alone.
	for _, name := range []string{"capability-violation.jsonl", "malformed-input.jsonl", "capability-grant.jsonl"} {
		envs := conformanceEnvelopes(t, name)
		for _, env := range envs {
			for _, self := range []string{"proposer", "calculator", "human", "fulfiller"} {
				st := newSpaceState(self)
				if e := st.observe(&env); e.lost != "" {
					t.Fatalf("%s %s as %s: lost %q", name, env.ID, self, e.lost)
				}
			}
		}
	}
}

func TestConformanceErrorShapes(t *testing.T) {
	payload := func(env Envelope) ErrorPayload {
		t.Helper()
		var p ErrorPayload
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	viol := conformanceEnvelopes(t, "capability-violation.jsonl")
	equal(t, "violation", []any{viol[0].CorrelationID, payload(viol[0])}, []any{CorrelationIDs{"viol-proposer-request"},
		ErrorPayload{Error: ErrorCapabilityViolation, AttemptedKind: KindRequest,
			YourCapabilities: []Capability{{Kind: "mcp/proposal"}, {Kind: "mcp/withdraw"}, {Kind: "chat"}, baseline}}})
	equal(t, "violation without id", viol[3].CorrelationID, CorrelationIDs(nil))
	equal(t, "register refused", payload(viol[6]), ErrorPayload{Error: "invalid_request",
		Message: "system/register is reserved for the gateway. Use capability/grant instead."})
	if payload(viol[6]).SessionGone() {
		t.Fatal("invalid_request taken for a lost session")
	}

	bad := conformanceEnvelopes(t, "malformed-input.jsonl")
	equal(t, "parse error", []any{bad[0].ID, bad[0].From, bad[0].To, payload(bad[0])}, []any{"", "", Recipients(nil),
		ErrorPayload{Error: "Expected double-quoted property name in JSON at position 17", Code: "PROCESSING_ERROR"}})
	equal(t, "validation error", payload(bad[1]), ErrorPayload{Error: "Message must be an object", Code: "VALIDATION_ERROR"})
	equal(t, "violation without kind", payload(bad[4]).AttemptedKind, "")
	equal(t, "stream error", []any{bad[9].From, bad[9].IsFromGateway(), payload(bad[9])}, []any{"gateway", true,
		ErrorPayload{Error: "unauthorized_stream_write", StreamID: "stream-404", Message: "You are not authorized to write to stream stream-404"}})

	hs := conformanceEnvelopes(t, "handshake-variants.jsonl")
	i := slices.IndexFunc(hs, func(e Envelope) bool { return e.Kind == KindError })
	if i < 0 {
		t.Fatal("no error in handshake-variants.jsonl")
	}
	// Sent before any join: to is [null], and no capabilities at all.
	equal(t, "error before join", []any{hs[i].CorrelationID, hs[i].To, payload(hs[i]).SessionGone()}, []any{CorrelationIDs{"before-join-1"}, Recipients{""}, true})
	if newSpaceState("fulfiller").observe(&hs[i]).lost != "" {
		t.Fatal("an error addressed to nobody ended our session")
	}
}

func TestConformanceNormalisation(t *testing.T) {
	envs := conformanceEnvelopes(t, "normalisation.jsonl")
	equal(t, "string correlation_id after the gateway", envs[1].CorrelationID, CorrelationIDs{"proposal-add-1"})
	equal(t, "v0.3 passes", []any{envs[2].Protocol, envs[2].ID}, []any{ProtocolV03, "v03-1"})
	equal(t, "extra fields", []any{string(envs[3].Context), envs[3].To, envs[3].AddressedTo("anyone")}, []any{`"thread-1/sub"`, Recipients{}, true})
	if !bytes.Contains(envs[3].Raw, []byte(`"x_custom":{"a":1}`)) {
		t.Fatal("Raw lost the unknown field")
	}

	// What the client sent, before the gateway turned it into an array.
	for i, line := range conformanceLines(t, "transcript.jsonl") {
		var rec transcriptRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Seq != 283 {
			continue
		}
		if !bytes.Contains(rec.Frame, []byte(`"correlation_id": "proposal-add-1"`)) && !bytes.Contains(rec.Frame, []byte(`"correlation_id":"proposal-add-1"`)) {
			t.Fatalf("transcript:%d is not the string correlation_id frame: %s", i+1, rec.Frame)
		}
		var env Envelope
		if err := json.Unmarshal(rec.Frame, &env); err != nil {
			t.Fatal(err)
		}
		equal(t, "bare string correlation_id", env.CorrelationID, CorrelationIDs{"proposal-add-1"})
		return
	}
	t.Fatal("transcript seq 283 not found")
}

func TestConformanceForgedSystemEnvelopes(t *testing.T) {
	// The gateway does not authenticate from: a system/* holder's forged
	// welcome and presence look exactly like the gateway's. The client takes
	// them (the gateway still enforces capabilities); this pins that the
	// limitation is known rather than hidden.
	envs := conformanceEnvelopes(t, "system-kinds.jsonl")
	st := newSpaceState("observer")
	st.others["calculator"] = Participant{ID: "calculator"}
	for i := range envs {
		st.observe(&envs[i])
	}
	equal(t, "forged leave applied", ids(st.roster()), []string{})
	equal(t, "forged welcome applied", st.caps, []Capability{{Kind: "*"}})
}

func TestConformanceProposalFlowAsFulfiller(t *testing.T) {
	envs := conformanceEnvelopes(t, "proposal-flow.fulfiller.jsonl")
	mine := &Subscription{}
	all := &Subscription{all: true}
	var gotMine, gotAll []string
	pend := pendingCalls{m: map[string]*call{}}
	waits := map[string]<-chan callResult{
		"fulfiller-req-1": pend.add("fulfiller-req-1", "calculator", json.RawMessage(`2`)),
		"elicit-5":        pend.add("elicit-5", "human", json.RawMessage(`4`)),
		"fulfiller-req-7": pend.add("fulfiller-req-7", "calculator", json.RawMessage(`7`)),
		"elicit-6":        pend.add("elicit-6", "calculator", json.RawMessage(`6`)), // the human answers: not accepted
	}
	logs := &logBuffer{}
	for i := range envs {
		env := &envs[i]
		if env.From == "fulfiller" {
			continue
		}
		if mine.wants("fulfiller", env) {
			gotMine = append(gotMine, env.ID)
		}
		if all.wants("fulfiller", env) {
			gotAll = append(gotAll, env.ID)
		}
		if env.Kind == KindResponse {
			pend.resolve(*env, slog.New(slog.NewTextHandler(logs, nil)))
		}
	}
	equal(t, "addressed to fulfiller or everyone", gotMine, []string{"calculator-1795342292755-1", "proposal-add-1",
		"calculator-1795342293010-2", "calculator-1795342293517-3", "withdraw-3", "human-1795342294629-4",
		"calculator-1795342294682-5", "human-1795342294936-6", "calculator-1795342295241-7",
		"calculator-1795342295243-8", "calculator-1795342295515-9"})
	equal(t, "with All", len(gotAll), 18)

	result := func(id string) callResult {
		select {
		case r := <-waits[id]:
			return r
		default:
			t.Fatalf("%s not answered", id)
		}
		return callResult{}
	}
	equal(t, "add", string(result("fulfiller-req-1").resp.Result), `{"content":[{"type":"text","text":"15"}]}`)
	equal(t, "elicitation", string(result("elicit-5").resp.Result), `{"action":"accept","content":{"approve":true,"note":"ok"}}`)
	equal(t, "unknown tool", result("fulfiller-req-7").resp.Error, &RPCError{Code: -32602, Message: "Unknown tool: divide"})
	equal(t, "still pending", pend.len(), 1)
	if !strings.Contains(logs.String(), "from=human") {
		t.Fatalf("wrong answerer not logged: %s", logs)
	}
}

// The reference SDK's answers (mew bridge in front of a real MCP server)
// carry no jsonrpc and no id: each names its request by correlation_id
// alone, and each must resolve the request it names (docs/design.md rule
// 12). The request envelopes are the recording's own, as if we had sent
// them; the one the bridge never answers stays pending.
func TestConformanceSDKBridgeAnswersResolve(t *testing.T) {
	envs := conformanceEnvelopes(t, "sdk-bridge.jsonl")
	pend := pendingCalls{m: map[string]*call{}}
	waits := map[string]<-chan callResult{}
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	for _, env := range envs {
		switch env.Kind {
		case KindRequest:
			var req RPCRequest
			if err := json.Unmarshal(env.Payload, &req); err != nil {
				t.Fatal(err)
			}
			waits[env.ID] = pend.add(env.ID, env.To[0], req.ID)
		case KindResponse:
			if !pend.resolve(env, log) {
				t.Errorf("SDK answer %s to %s not taken", env.ID, env.CorrelationID.First())
			}
		}
	}
	result := func(id string) RPCResponse {
		t.Helper()
		select {
		case r := <-waits[id]:
			if r.err != nil {
				t.Fatalf("%s: %v", id, r.err)
			}
			return r.resp
		default:
			t.Fatalf("%s not answered", id)
		}
		return RPCResponse{}
	}
	if got := result("rec-tools-list"); !strings.HasPrefix(string(got.Result), `{"tools":[{"name":"read_file"`) || got.ID != nil {
		t.Errorf("tools/list: %s (id %s)", got.Result, got.ID)
	}
	equal(t, "read", string(result("rec-call-ok").Result), `{"content":[{"type":"text","text":"hello from a real file\n"}],"structuredContent":{"content":"hello from a real file\n"}}`)
	equal(t, "denied", string(result("rec-call-denied").Result), `{"content":[{"type":"text","text":"Access denied - path outside allowed directories: /etc/passwd not in /srv/files"}],"isError":true}`)
	equal(t, "unknown tool", result("rec-call-unknown").Error, &RPCError{Code: -32603, Message: "Tool not found: no_such_tool"})
	equal(t, "string id", string(result("rec-string-id").Result), `{"content":[{"type":"text","text":"Allowed directories:\n/srv/files"}],"structuredContent":{"content":"Allowed directories:\n/srv/files"}}`)
	equal(t, "unhandled method left unanswered", pend.len(), 1)
	if logs.String() != "" {
		t.Errorf("honest SDK answers logged as suspicious: %s", logs)
	}
}

// An answer that names our request and comes from its addressee but
// carries another JSON-RPC id answers something else: it is not taken,
// is logged, and the real answer still counts.
func TestAnswerWithAnotherRPCIDNotTaken(t *testing.T) {
	pend := pendingCalls{m: map[string]*call{}}
	wait := pend.add("req-1", "fs", json.RawMessage(`41`))
	logs := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	answer := func(id, payload string) bool {
		return pend.resolve(Envelope{ID: id, From: "fs", Kind: KindResponse, CorrelationID: CorrelationIDs{"req-1"}, Payload: json.RawMessage(payload)}, log)
	}
	if answer("forged", `{"jsonrpc":"2.0","id":40,"result":{"content":[]}}`) {
		t.Fatal("an answer with id 40 was taken for request 41")
	}
	if answer("forged-string", `{"jsonrpc":"2.0","id":"41","result":{}}`) {
		t.Fatal(`an answer with id "41" was taken for request 41`)
	}
	if !strings.Contains(logs.String(), "another JSON-RPC id") || !strings.Contains(logs.String(), "envelope=forged") {
		t.Fatalf("wrong id not logged: %s", logs)
	}
	if !answer("real", `{"jsonrpc":"2.0","id":41.0,"result":{"ok":true}}`) {
		t.Fatal("the real answer (id 41.0) was not taken")
	}
	r := <-wait
	equal(t, "result", string(r.resp.Result), `{"ok":true}`)
}

func TestSameRPCID(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`7`, `7`, true}, {`7`, `7.0`, true}, {`7.50`, `7.5`, false}, {`"7"`, `7`, false},
		{`"a"`, `"a"`, true}, {`"a"`, `"b"`, false}, {`1e999999999`, `1`, false},
		{`1e999999999`, `1e999999999`, true}, {`null`, `null`, false}, {`{}`, `{}`, false},
		{`9007199254740993`, `9007199254740992`, false},
		{`-3`, `-3`, true}, {`0`, `0`, true}, {`-`, `-`, false}, {``, ``, false},
		{` 7`, ` 7`, true}, {`123456789012345678901234567890`, `123456789012345678901234567890`, true},
	} {
		if got := SameRPCID(json.RawMessage(c.a), json.RawMessage(c.b)); got != c.same {
			t.Errorf("SameRPCID(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

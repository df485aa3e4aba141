package grants

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

var t0 = time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)

func offer(t *testing.T, maxTTL string, scope ...string) *decision.Grantable {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"max_ttl": maxTTL, "scope": scope})
	var g decision.Grantable
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func call(proposer, tool, server string, args string) Call {
	var a map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		panic(err)
	}
	return Call{Proposer: proposer, Tool: tool, Server: server, Arguments: a}
}

// The demo's grant: read_file under /srv/app for 1h, for coder only.
func TestPrefixGrantCoversTheDirectoryOnly(t *testing.T) {
	g, err := New("g1", offer(t, "8h", "proposer", "tool", "arguments.path:prefix"),
		call("coder", "read_file", "fs", `{"path":"/srv/app/config.yaml"}`), time.Hour, "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Pins) != 1 || g.Pins[0].Field != "arguments.path" || g.Pins[0].Prefix != "/srv/app/" || g.Pins[0].Value != nil || !g.Expires.Equal(t0.Add(time.Hour)) {
		t.Fatalf("grant %+v", g)
	}
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		c    Call
		want bool
	}{
		{call("coder", "read_file", "fs", `{"path":"/srv/app/config.yaml"}`), true},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/sub/x.txt","extra":1}`), true}, // unpinned arguments are free
		{call("coder", "read_file", "other-fs", `{"path":"/srv/app/x"}`), true},             // server not pinned
		{call("coder", "read_file", "fs", `{"path":"/srv/apple/x"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/../../etc/passwd"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/./x"}`), false},
		// Read as other paths by a tool (security round 3, item 8).
		{call("coder", "read_file", "fs", `{"path":"/srv/app/..\\..\\etc\\passwd"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/sub\\x"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/%2e%2e/%2e%2e/etc/passwd"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/%2F..%2Fetc"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/x\n/etc/passwd"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/x\u0000"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/x\u0085y"}`), false},
		{call("coder", "read_file", "fs", `{"path":"/srv/app/100%"}`), true},  // a percent sign that escapes nothing
		{call("coder", "read_file", "fs", `{"path":"/srv/app/..x/y"}`), true}, // a name, not a segment
		{call("coder", "read_file", "fs", `{"path":"/srv/app"}`), false},
		{call("coder", "read_file", "fs", `{"path":["/srv/app/x"]}`), false},
		{call("coder", "read_file", "fs", `{}`), false},
		{call("mallory", "read_file", "fs", `{"path":"/srv/app/x"}`), false},
		{call("coder", "write_file", "fs", `{"path":"/srv/app/x"}`), false},
	} {
		if got := g.Matches(tc.c, now); got != tc.want {
			t.Errorf("Matches(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
	same := call("coder", "read_file", "fs", `{"path":"/srv/app/x"}`)
	if g.Matches(same, t0.Add(time.Hour)) {
		t.Error("matches at its expiry")
	}
	g.Revoked = true
	if g.Matches(same, now) {
		t.Error("a revoked grant matches")
	}
}

// Exact pins compare canonical JSON: the same value however it is written,
// and nothing else.
func TestExactPins(t *testing.T) {
	g, err := New("g2", offer(t, "1h", "proposer", "tool", "server", "arguments.query", "arguments.limit"),
		call("coder", "search", "db", `{"query":{"b":1,"a":"x"},"limit":10,"other":true}`), 15*time.Minute, "alice", t0)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	for _, tc := range []struct {
		c    Call
		want bool
	}{
		{call("coder", "search", "db", `{"query":{"a":"x","b":1.0},"limit":1e1}`), true},
		{call("coder", "search", "db", `{"query":{"a":"x","b":2},"limit":10}`), false},
		{call("coder", "search", "db", `{"query":{"a":"x","b":1},"limit":"10"}`), false},
		{call("coder", "search", "db2", `{"query":{"a":"x","b":1},"limit":10}`), false},
		{call("coder", "search", "db", `{"query":{"a":"x","b":1}}`), false},
	} {
		if got := g.Matches(tc.c, now); got != tc.want {
			t.Errorf("Matches(%s) = %v, want %v", tc.c.Arguments, got, tc.want)
		}
	}
}

// What cannot be granted is refused, never widened.
func TestNewRefuses(t *testing.T) {
	o := offer(t, "8h", "proposer", "tool", "arguments.path:prefix")
	ok := call("coder", "read_file", "fs", `{"path":"/srv/app/x"}`)
	if _, err := New("g", nil, ok, time.Hour, "alice", t0); !errors.Is(err, ErrNotOffered) {
		t.Errorf("no offer: %v", err)
	}
	for _, ttl := range []time.Duration{9 * time.Hour, 2 * time.Hour, 0, -time.Hour} {
		if _, err := New("g", o, ok, ttl, "alice", t0); !errors.Is(err, ErrBadTTL) {
			t.Errorf("ttl %v: %v, want ErrBadTTL", ttl, err)
		}
	}
	if _, err := New("g", o, call("coder", "read_file", "fs", `{"other":1}`), time.Hour, "alice", t0); err == nil {
		t.Error("a pinned argument missing from the approved call made a grant")
	}
	if _, err := New("g", o, call("coder", "read_file", "fs", `{"path":"/srv/app/../etc/x"}`), time.Hour, "alice", t0); err == nil {
		t.Error("a prefix was pinned to a path with .. segments")
	}
	for _, path := range []string{`/srv/app\\..\\x/f`, `/srv/%2e%2e/x/f`, `/srv/app\n/f`} {
		if _, err := New("g", o, call("coder", "read_file", "fs", `{"path":"`+path+`"}`), time.Hour, "alice", t0); err == nil {
			t.Errorf("a prefix was pinned to %s", path)
		}
	}
	// A top-level path's directory is the root: pinned exactly instead.
	g, err := New("g", o, call("coder", "read_file", "fs", `{"path":"/etc"}`), time.Hour, "alice", t0)
	if err != nil || g.Matches(call("coder", "read_file", "fs", `{"path":"/etc/passwd"}`), t0) || !g.Matches(call("coder", "read_file", "fs", `{"path":"/etc"}`), t0) {
		t.Errorf("grant for /etc: %+v, %v; want exactly /etc", g, err)
	}
}

package ops_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
)

// The operator lists grants and revokes one: it stops matching at once,
// stays listed (not live), and the API answers 401 without the token, 404
// for an unknown grant, 503 when the fulfiller keeps no grants. (The
// gateway authenticates senders here, so the grant may be pinned to its
// proposer.)
func TestOperatorListsAndRevokesGrants(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	d, err := policies.ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	call := grants.Call{Proposer: "coder", Tool: "read_file", Server: "fs", Arguments: map[string]json.RawMessage{"path": json.RawMessage(`"/srv/app/config.yaml"`)}}
	g, err := grants.New("g-1", d.Grantable, call, time.Hour, "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	reg := grantstore.NewRegistry(nil, nil)
	reg.GatewayAuthenticatesFrom(true)
	if err := reg.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	metrics := ops.NewMetrics(&ops.Source{})
	srv := httptest.NewServer(ops.NewHandler(ops.Options{Token: token, Grants: reg, Metrics: metrics, Now: func() time.Time { return now.Add(time.Minute) }}))
	defer srv.Close()

	if code, _ := do(t, "GET", srv.URL+"/v1/grants", ""); code != 401 {
		t.Errorf("GET /v1/grants without the token: %d, want 401", code)
	}
	if code, _ := do(t, "DELETE", srv.URL+"/v1/grants/g-1", "wrong"); code != 401 {
		t.Errorf("DELETE with a wrong token: %d, want 401", code)
	}
	if m := reg.Matching(call, now.Add(time.Minute)); len(m) != 1 {
		t.Fatal("a refused revoke revoked the grant")
	}
	grant := `{"id":"g-1","proposer":"coder","tool":"read_file","server":"fs","pins":[{"field":"arguments.path","prefix":"/srv/app/"}],"granted_by":"alice","created":"2026-11-25T10:00:00Z","expires":"2026-11-25T11:00:00Z"`
	code, body := do(t, "GET", srv.URL+"/v1/grants", token)
	if want := `{"grants":[` + grant + `,"proposer_pinned":true,"live":true}]}`; code != 200 || compact(t, body) != compact(t, want) {
		t.Errorf("GET /v1/grants = %d %s\nwant %s", code, body, want)
	}
	if code, body := do(t, "GET", srv.URL+"/v1/grants/g-1", token); code != 200 || compact(t, body) != compact(t, grant+`,"proposer_pinned":true,"live":true}`) {
		t.Errorf("GET /v1/grants/g-1 = %d %s", code, body)
	}
	if code, _ := do(t, "GET", srv.URL+"/v1/grants/nope", token); code != 404 {
		t.Errorf("GET an unknown grant: %d, want 404", code)
	}
	if code, _ := do(t, "DELETE", srv.URL+"/v1/grants/nope", token); code != 404 {
		t.Errorf("DELETE an unknown grant: %d, want 404", code)
	}
	code, body = do(t, "DELETE", srv.URL+"/v1/grants/g-1", token)
	if want := grant + `,"revoked":true,"proposer_pinned":true,"live":false}`; code != 200 || compact(t, body) != compact(t, want) {
		t.Errorf("DELETE /v1/grants/g-1 = %d %s\nwant %s", code, body, want)
	}
	if m := reg.Matching(call, now.Add(time.Minute)); len(m) != 0 {
		t.Errorf("the revoked grant still matches: %+v", m)
	}
	if code, _ := do(t, "DELETE", srv.URL+"/v1/grants/g-1", token); code != 200 {
		t.Errorf("a second revoke: %d, want 200 (harmless)", code)
	}
	if _, body := do(t, "GET", srv.URL+"/metrics", ""); !strings.Contains(body, `fulfiller_grants_total{event="revoked"} 1`+"\n") {
		t.Errorf("revocations counted: %s", grepLines(body, "fulfiller_grants_total"))
	}
	if code, body := do(t, "GET", srv.URL+"/v1/grants", token); code != 200 || compact(t, body) != compact(t, `{"grants":[`+grant+`,"revoked":true,"proposer_pinned":true,"live":false}]}`) {
		t.Errorf("GET after the revoke = %d %s", code, body)
	}

	none := httptest.NewServer(ops.NewHandler(ops.Options{Token: token}))
	defer none.Close()
	if code, _ := do(t, "GET", none.URL+"/v1/grants", token); code != 503 {
		t.Errorf("GET /v1/grants without grants: %d, want 503", code)
	}
}

// Where the gateway is not said to authenticate senders (the default), the
// listing says which grants are pinned to a proposer: such a grant made
// before (or by a fulfiller run with --gateway-authenticates-from) is
// still listed, but not live — it matches nothing, since anyone could
// claim that proposer's name — while a grant without the pin is live and
// has no proposer at all (docs/design.md "Proposer identity and grants").
func TestOperatorShowsWhetherAGrantIsPinnedToAProposer(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	offer := func(scope string) *decision.Grantable {
		d, err := policies.ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"8h","scope":` + scope + `}}`))
		if err != nil {
			t.Fatal(err)
		}
		return d.Grantable
	}
	call := grants.Call{Proposer: "coder", Tool: "read_file", Server: "fs", Arguments: map[string]json.RawMessage{"path": json.RawMessage(`"/srv/app/secret.key"`)}}
	pinned, err := grants.New("g-pinned", offer(`["proposer","tool","arguments.path"]`), call, time.Hour, "alice", now)
	if err != nil {
		t.Fatal(err)
	}
	anyone, err := grants.New("g-anyone", offer(`["tool","arguments.path"]`), call, time.Hour, "alice", now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg := grantstore.NewRegistry(nil, nil)
	for _, g := range []grants.Grant{pinned, anyone} {
		if err := reg.Create(t.Context(), g); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(ops.NewHandler(ops.Options{Token: token, Grants: reg, Now: func() time.Time { return now.Add(time.Minute) }}))
	defer srv.Close()
	code, body := do(t, "GET", srv.URL+"/v1/grants", token)
	want := `{"grants":[` +
		`{"id":"g-pinned","proposer":"coder","tool":"read_file","server":"fs","pins":[{"field":"arguments.path","value":"/srv/app/secret.key"}],"granted_by":"alice","created":"2026-11-25T10:00:00Z","expires":"2026-11-25T11:00:00Z","proposer_pinned":true,"live":false},` +
		`{"id":"g-anyone","tool":"read_file","server":"fs","pins":[{"field":"arguments.path","value":"/srv/app/secret.key"}],"granted_by":"alice","created":"2026-11-25T10:00:01Z","expires":"2026-11-25T11:00:01Z","proposer_pinned":false,"live":true}]}`
	if code != 200 || compact(t, body) != compact(t, want) {
		t.Errorf("GET /v1/grants = %d %s\nwant %s", code, body, want)
	}
	// What the policy sees: only the grant that does not rely on from,
	// for coder and for anyone claiming to be someone else alike.
	for _, who := range []string{"coder", "other"} {
		c := call
		c.Proposer = who
		if m := reg.Matching(c, now.Add(time.Minute)); len(m) != 1 || m[0].ID != "g-anyone" {
			t.Errorf("Matching for %s = %+v, want only g-anyone", who, m)
		}
	}
}

// grepLines are the lines of body that start with prefix.
func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

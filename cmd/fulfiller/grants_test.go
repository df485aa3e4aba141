package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/grants"
	"github.com/mewkit/fulfiller/fulfill/grants/grantstore"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
)

// fulfiller grants list and revoke, against an operator API that keeps one
// grant: the table, JSON, a revoke that takes effect at once, and the
// exit codes for an unknown grant, a wrong token and a missing --http.
// The grant is pinned to a proposer, and the fulfiller does not run with
// --gateway-authenticates-from: it is listed as unusable, with why
// (docs/design.md "Proposer identity and grants").
func TestGrantsCommand(t *testing.T) {
	d, err := policies.ParseDecision([]byte(`{"action":"escalate","grantable":{"max_ttl":"8h","scope":["proposer","tool","arguments.path:prefix"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now().UTC().Truncate(time.Second)
	// The proposer's name carries an escape sequence: it is shown escaped.
	// (A path with one is never pinned to a prefix: grants.Ambiguous.)
	call := grants.Call{Proposer: "coder\x1b[2J", Tool: "read_file", Server: "fs", Arguments: map[string]json.RawMessage{"path": json.RawMessage(`"/srv/prod/logs/app.log"`)}}
	g, err := grants.New("grant-1", d.Grantable, call, time.Hour, "oncall-alice", created)
	if err != nil {
		t.Fatal(err)
	}
	reg := grantstore.NewRegistry(nil, nil)
	if err := reg.Create(t.Context(), g); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ops.NewHandler(ops.Options{Token: "ops-secret", Grants: reg}))
	defer srv.Close()
	env := map[string]string{"FULFILLER_HTTP": srv.URL, "FULFILLER_HTTP_TOKEN": "ops-secret"}
	expires := g.Expires.Format(time.RFC3339)

	stdout, stderr, code := cliEnv(t, "", env, "grants", "list")
	if code != 0 || stderr != "" {
		t.Fatalf("grants list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 3 || lines[0] != "ID       STATE     PROPOSER              ALLOWS                                                GRANTED BY    EXPIRES" ||
		!strings.HasPrefix(lines[1], `grant-1  unusable  pinned: coder\x1b[2J  coder\x1b[2J → read_file, path under /srv/prod/logs/  oncall-alice  `+expires+" (") ||
		lines[2] != "unusable: pinned to a proposer, and the fulfiller does not run with --gateway-authenticates-from, so anyone could claim that name; it matches nothing (revoke it)" {
		t.Errorf("grants list:\n%s", stdout)
	}
	stdout, _, code = cliEnv(t, "", env, "grants", "list", "--format", "json")
	var doc ops.GrantList
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || len(doc.Grants) != 1 || doc.Grants[0].ID != "grant-1" || doc.Grants[0].Live || !doc.Grants[0].ProposerPinned {
		t.Errorf("grants list --format json: exit %d\n%s", code, stdout)
	}

	stdout, stderr, code = cliEnv(t, "", env, "grants", "revoke", "grant-1")
	if want := "revoked grant-1: coder\\x1b[2J → read_file, path under /srv/prod/logs/\n"; code != 0 || stdout != want {
		t.Errorf("grants revoke: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	if reg.Matching(grants.Call{Proposer: "coder\x1b[2J", Tool: "read_file", Arguments: map[string]json.RawMessage{"path": json.RawMessage(`"/srv/prod/logs/x"`)}}, time.Now()) != nil {
		t.Error("the revoked grant still matches")
	}
	if stdout, _, code = cliEnv(t, "", env, "grants", "list"); code != 0 || stdout != "no grants\n" {
		t.Errorf("grants list after the revoke: exit %d\n%s", code, stdout)
	}
	if stdout, _, code = cliEnv(t, "", env, "grants", "list", "--all"); code != 0 || !strings.Contains(stdout, "grant-1  revoked  ") {
		t.Errorf("grants list --all after the revoke: exit %d\n%s", code, stdout)
	}

	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{"unknown grant", env, []string{"grants", "revoke", "grant-9"}, 1, "fulfiller: grants revoke grant-9: the operator API answered 404: no grant grant-9\n"},
		{"wrong token", map[string]string{"FULFILLER_HTTP": srv.URL, "FULFILLER_HTTP_TOKEN": "guess"}, []string{"grants", "list"}, 1, "fulfiller: grants list: the operator API answered 401: "},
		{"no --http", map[string]string{"FULFILLER_HTTP_TOKEN": "ops-secret"}, []string{"grants", "list"}, 2, "fulfiller: --http is required: the address of the fulfiller's operator API (run's --http)\n"},
		{"bad format", env, []string{"grants", "list", "--format", "yaml"}, 2, "fulfiller: --format \"yaml\": want pretty or json\n"},
		{"revoke without id", env, []string{"grants", "revoke"}, 2, "fulfiller: name the one grant to revoke (fulfiller grants list shows their ids)\n"},
	} {
		_, stderr, code := cliEnv(t, "", c.env, c.args...)
		if code != c.code || !strings.HasPrefix(stderr, c.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, stderr %q", c.name, code, stderr, c.code, c.stderr)
		}
		if strings.Contains(stderr, "ops-secret") {
			t.Errorf("%s: the token is printed: %q", c.name, stderr)
		}
	}
}

package ops_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/internal/ops"
)

// groupOperator answers as a member of a group whose store is reachable
// or not (fulfill's own tests run the real thing on NATS).
type groupOperator struct {
	own, others []fulfill.Snapshot
	storeDown   bool
	cancelErr   error
}

var errDown = fmt.Errorf("list the group's pending work: %w: nats: timeout", fulfill.ErrStoreUnavailable)

func (g *groupOperator) GroupPending(context.Context) ([]fulfill.Snapshot, error) {
	if g.storeDown {
		return g.own, errDown
	}
	return append(append([]fulfill.Snapshot(nil), g.own...), g.others...), nil
}

func (g *groupOperator) GroupGet(_ context.Context, id string) (fulfill.Snapshot, bool, error) {
	for _, s := range g.own {
		if s.ID == id {
			return s, true, nil
		}
	}
	if g.storeDown {
		return fulfill.Snapshot{}, false, fmt.Errorf("read proposal %s: %w: nats: timeout", id, fulfill.ErrStoreUnavailable)
	}
	for _, s := range g.others {
		if s.ID == id {
			return s, true, nil
		}
	}
	return fulfill.Snapshot{}, false, nil
}

func (g *groupOperator) Cancel(string, string) error { return g.cancelErr }

func (g *groupOperator) ToolViews() []fulfill.ToolView { return nil }

// The operator API of a group member: every proposal carries its owner;
// with the store unreadable the list still shows this member's work, with
// a warning that it is incomplete, and a proposal it does not hold is
// neither shown (503, not 404: the store cannot say) nor cancelled (503).
func TestOperatorAPIInAGroup(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	g := &groupOperator{
		own: []fulfill.Snapshot{{ID: "p-a", From: "coder", Method: "tools/call", Tool: "add", State: "deciding", Received: at, Owner: "ful-b"}},
		others: []fulfill.Snapshot{{ID: "p-b", From: "coder", Method: "tools/call", Tool: "delete", Target: "fs", State: "awaiting_approval", Received: at, Deadline: at.Add(time.Minute), Owner: "ful-a"},
			{ID: "p-c", From: "coder", Method: "tools/call", Tool: "migrate", Target: "jobs", State: "task", Received: at, Owner: "ful-a",
				Task: &fulfill.TaskInfo{ID: "T1", Spec: fulfill.TaskSpec2025, Status: "working", Created: at.Add(time.Second), Deadline: at.Add(time.Hour)}}},
	}
	h := ops.NewHandler(ops.Options{Token: token, Now: func() time.Time { return at.Add(2 * time.Second) }})
	h.SetOperator(g)
	hs := httptest.NewServer(h)
	defer hs.Close()

	own := `{"id":"p-a","from":"coder","method":"tools/call","tool":"add","state":"deciding","received":"2026-11-22T10:00:00Z","owner":"ful-b","age_seconds":2}`
	other := `{"id":"p-b","from":"coder","method":"tools/call","tool":"delete","target":"fs","state":"awaiting_approval","received":"2026-11-22T10:00:00Z","deadline":"2026-11-22T10:01:00Z","owner":"ful-a","age_seconds":2}`
	check := func(method, path string, wantCode int, want string) {
		t.Helper()
		code, body := do(t, method, hs.URL+path, token)
		if code != wantCode || compact(t, body) != compact(t, want) {
			t.Errorf("%s %s = %d %s, want %d %s", method, path, code, compact(t, body), wantCode, compact(t, want))
		}
	}
	task := `{"id":"p-c","from":"coder","method":"tools/call","tool":"migrate","target":"jobs","state":"task","received":"2026-11-22T10:00:00Z","task":{"id":"T1","spec":"2025-11-25","status":"working","created":"2026-11-22T10:00:01Z","deadline":"2026-11-22T11:00:00Z"},"owner":"ful-a","age_seconds":2}`
	check("GET", "/v1/proposals", 200, `{"proposals":[`+own+`,`+other+`,`+task+`]}`)
	check("GET", "/v1/proposals/p-b", 200, other)
	check("GET", "/v1/proposals/nope", 404, `{"error":"no pending proposal nope"}`)

	g.storeDown = true
	check("GET", "/v1/proposals", 200, `{"proposals":[`+own+`],"warning":"only this member's proposals are listed: list the group's pending work: pending-work store unavailable: nats: timeout"}`)
	check("GET", "/v1/proposals/p-a", 200, own)
	check("GET", "/v1/proposals/p-b", 503, `{"error":"read proposal p-b: pending-work store unavailable: nats: timeout"}`)
	g.cancelErr = fmt.Errorf("cancel p-b: %w: %w", fulfill.ErrStoreUnavailable, errors.New("nats: timeout"))
	check("DELETE", "/v1/proposals/p-b", 503, `{"error":"cancel p-b: pending-work store unavailable: nats: timeout"}`)
	g.cancelErr = fmt.Errorf("cancel p-b: %w", fulfill.ErrAnswered)
	check("DELETE", "/v1/proposals/p-b", 409, `{"error":"proposal p-b was already answered, or its fulfilment request is out"}`)
}

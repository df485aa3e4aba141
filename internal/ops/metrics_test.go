package ops_test

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
)

// TestMetricsFromEvents drives the metrics with lifecycle and approval
// events and the live sources, and checks the exposition.
func TestMetricsFromEvents(t *testing.T) {
	src := &ops.Source{}
	gw := &fakeGateway{}
	gw.connected.Store(true)
	src.SetGateway(gw)
	src.SetPolicy(fakePolicy{})
	m := ops.NewMetrics(src)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	ev := func(stage fulfill.Stage, id string, mod func(*fulfill.Event)) {
		e := fulfill.Event{Time: t0, Stage: stage, ProposalID: id}
		if mod != nil {
			mod(&e)
		}
		m.Observe(e)
	}
	ev(fulfill.StageReceived, "a", nil)
	ev(fulfill.StageDecided, "a", func(e *fulfill.Event) {
		e.Decision, e.Latency = &decision.Decision{Action: decision.Escalate}, 2*time.Millisecond
	})
	ev(fulfill.StageEscalated, "a", nil)
	ev(fulfill.StageApproved, "a", func(e *fulfill.Event) { e.Time = t0.Add(90 * time.Second) })
	ev(fulfill.StageFulfilling, "a", nil)
	ev(fulfill.StageFulfilled, "a", func(e *fulfill.Event) {
		e.RPCError, e.Latency = json.RawMessage(`{"code":-1}`), 50*time.Millisecond
	})
	// A result with isError is the tool's own failure (ENOENT, say): a
	// status of its own, neither ok nor a JSON-RPC error.
	ev(fulfill.StageFulfilled, "e", func(e *fulfill.Event) {
		e.Result, e.Latency = json.RawMessage(`{"content":[{"type":"text","text":"ENOENT"}],"isError":true}`), time.Millisecond
	})
	ev(fulfill.StageDecided, "b", func(e *fulfill.Event) {
		e.Decision = &decision.Decision{Action: decision.Reject, Reason: "policy", Err: policies.ErrEvalTimeout}
	})
	ev(fulfill.StageRejected, "b", func(e *fulfill.Event) { e.Reason = "policy" })
	ev(fulfill.StageUndelivered, "b", func(e *fulfill.Event) { e.Envelope, e.Reason = "mcp/reject", "refused" })
	ev(fulfill.StageUndelivered, "c", func(e *fulfill.Event) { e.Envelope, e.Reason = "mcp/reject", "not_written" })
	// Tasks: one completed (status events twice: counted once), one past
	// its deadline, one withdrawn, one still running.
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		ev(fulfill.StageTask, id, func(e *fulfill.Event) { e.Task = &fulfill.TaskInfo{ID: "task-" + id, Status: "working"} })
	}
	ev(fulfill.StageTask, "t1", func(e *fulfill.Event) { e.Task = &fulfill.TaskInfo{ID: "task-t1", Status: "input_required"} })
	ev(fulfill.StageFulfilled, "t1", func(e *fulfill.Event) { e.Task = &fulfill.TaskInfo{ID: "task-t1", Status: "completed"} })
	ev(fulfill.StageRejected, "t2", func(e *fulfill.Event) { e.Reason = "timeout" })
	ev(fulfill.StageWithdrawn, "t3", nil)
	m.ObserveApproval(elicit.Event{Kind: elicit.EventForgery, Approver: "alice"})
	m.ObserveApproval(elicit.Event{Kind: elicit.EventAnswered, Approver: "alice", Action: "accept", Approve: true})
	m.Notification("webhook", "sent")
	m.Notification("webhook", "sent")
	m.Notification("smtp", "dropped")
	m.NotificationRetry("webhook")

	rec := httptest.NewRecorder()
	ops.NewHandler(ops.Options{Source: src, Metrics: m}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`fulfiller_proposals_received_total 1`,
		`fulfiller_decisions_total{action="escalate",failed="0"} 1`,
		`fulfiller_decisions_total{action="reject",failed="1"} 1`,
		`fulfiller_decision_duration_seconds_count 2`,
		`fulfiller_approval_wait_seconds_sum{outcome="approved"} 90`,
		`fulfiller_approval_wait_seconds_bucket{outcome="approved",le="81"} 0`,
		`fulfiller_approval_wait_seconds_bucket{outcome="approved",le="243"} 1`,
		`fulfiller_escalations_open 0`,
		`fulfiller_fulfilment_duration_seconds_count{status="error"} 1`,
		`fulfiller_fulfilment_duration_seconds_count{status="tool_error"} 1`,
		`fulfiller_proposals_total{outcome="fulfilled",reason=""} 1`,
		`fulfiller_proposals_total{outcome="rejected",reason="policy"} 1`,
		`fulfiller_answers_undelivered_total{kind="mcp/reject",reason="refused"} 1`,
		`fulfiller_answers_undelivered_total{kind="mcp/reject",reason="not_written"} 1`,
		`fulfiller_approver_answers_total{kind="accept"} 1`,
		`fulfiller_approver_answers_total{kind="forgery"} 1`,
		`fulfiller_gateway_connected 1`,
		`fulfiller_tasks_total{event="created"} 4`,
		`fulfiller_tasks_total{event="completed"} 1`,
		`fulfiller_tasks_total{event="timeout"} 1`,
		`fulfiller_tasks_total{event="withdrawn"} 1`,
		`fulfiller_tasks_running 1`,
		`fulfiller_notifications_total{result="sent",target_kind="webhook"} 2`,
		`fulfiller_notifications_total{result="dropped",target_kind="smtp"} 1`,
		`fulfiller_notification_retries_total{target_kind="webhook"} 1`,
		`fulfiller_gateway_reconnects_total 3`,
		`fulfiller_gateway_sessions_lost_total 4`,
		`fulfiller_policy_info{default="false",revision="sha256:abc"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("missing %q", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", body)
	}
	// No counts source yet: the pending gauges are absent rather than a made-up 0.
	if strings.Contains(string(body), "fulfiller_proposals_pending") {
		t.Error("pending gauge without a source")
	}
}

// TestShadowMetrics: shadow decisions are counted by (live → shadow)
// action, a failed shadow as "error", drops apart; agreement and
// disagreement are told apart by the labels.
func TestShadowMetrics(t *testing.T) {
	m := ops.NewMetrics(&ops.Source{})
	shadow := func(live decision.Action, r fulfill.ShadowResult) {
		r.Live = live
		m.Observe(fulfill.Event{Stage: fulfill.StageShadow, ProposalID: "p", Shadow: &r})
	}
	shadow(decision.Fulfill, fulfill.ShadowResult{Decision: decision.Decision{Action: decision.Fulfill}, Agrees: true})
	shadow(decision.Escalate, fulfill.ShadowResult{Decision: decision.Decision{Action: decision.Fulfill}})
	shadow(decision.Escalate, fulfill.ShadowResult{Decision: decision.Decision{Action: decision.Fulfill}})
	shadow(decision.Reject, fulfill.ShadowResult{Decision: decision.Decision{Action: decision.Reject, Err: policies.ErrEvalTimeout}})
	shadow(decision.Reject, fulfill.ShadowResult{Dropped: true})

	rec := httptest.NewRecorder()
	ops.NewHandler(ops.Options{Source: &ops.Source{}, Metrics: m}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var got []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "fulfiller_shadow_") {
			got = append(got, line)
		}
	}
	want := []string{
		`fulfiller_shadow_decisions_total{live="escalate",shadow="fulfill"} 2`,
		`fulfiller_shadow_decisions_total{live="fulfill",shadow="fulfill"} 1`,
		`fulfiller_shadow_decisions_total{live="reject",shadow="error"} 1`,
		`fulfiller_shadow_dropped_total{live="reject"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("shadow metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Grants are counted by what happened to them.
func TestGrantMetrics(t *testing.T) {
	m := ops.NewMetrics(&ops.Source{})
	m.Observe(fulfill.Event{Stage: fulfill.StageGranted, ProposalID: "p1", GrantID: "grant-1"})
	m.Observe(fulfill.Event{Stage: fulfill.StageGranted, ProposalID: "p2", Message: "no grant made: …"})
	m.Observe(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: "p3", GrantID: "grant-1", Decision: &decision.Decision{Action: decision.Fulfill}})
	m.Observe(fulfill.Event{Stage: fulfill.StageDecided, ProposalID: "p4", Decision: &decision.Decision{Action: decision.Fulfill}})
	m.GrantRevoked()

	rec := httptest.NewRecorder()
	ops.NewHandler(ops.Options{Source: &ops.Source{}, Metrics: m}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var got []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "fulfiller_grants_") {
			got = append(got, line)
		}
	}
	want := []string{
		`fulfiller_grants_total{event="created"} 1`,
		`fulfiller_grants_total{event="failed"} 1`,
		`fulfiller_grants_total{event="revoked"} 1`,
		`fulfiller_grants_total{event="used"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("grant metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

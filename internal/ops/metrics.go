package ops

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
)

// Gateway is what the metrics and /readyz read of the MEW session;
// *agent.Client provides it.
type Gateway interface {
	Connected() bool
	Stats() agent.Stats
}

// Policy is what the metrics, /readyz and GET /v1/policy read of the policy
// engine; *policies.Engine provides it.
type Policy interface {
	Revision() string
	Files() []string
	IsDefault() bool
	LastReloadError() error
}

// ApproverKeys is what the metrics read of the reloaded --approver-keys
// file; *approverkeys.Watcher provides it.
type ApproverKeys interface {
	LastReloadError() error
	ReloadFailures() uint64
}

// Counter is what the pending and in-flight gauges read;
// *fulfill.Fulfiller provides it.
type Counter interface {
	Counts() (pending, inflight int)
}

// AuditLog is what /readyz and the metrics read of the decision log;
// *decisionlog.Logger provides it.
type AuditLog interface {
	Healthy() error // nil while records can be written
	WriteFailures() uint64
	Dropped() uint64
}

// Metrics holds fulfiller's Prometheus metrics in a registry of its own
// (not the global default), so that tests and embedders can run several
// side by side. It implements fulfill.Observer and state.Observer; pass ObserveApproval to
// elicit.Config.Observer for the approver metrics.
type Metrics struct {
	reg *prometheus.Registry

	received       prometheus.Counter
	proposals      *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	decisionDur    prometheus.Histogram
	fulfilDur      *prometheus.HistogramVec
	approvalDur    *prometheus.HistogramVec
	openEsc        prometheus.Gauge
	answers        *prometheus.CounterVec
	undelivered    *prometheus.CounterVec
	spoofs         *prometheus.CounterVec
	vetoHolders    *prometheus.CounterVec
	impersonations *prometheus.CounterVec
	shadows        *prometheus.CounterVec
	shadowDrops    *prometheus.CounterVec
	grants         *prometheus.CounterVec
	tasks          *prometheus.CounterVec
	tasksNow       prometheus.Gauge
	notifications  *prometheus.CounterVec
	notifyRetries  *prometheus.CounterVec

	bundleDownloads *prometheus.CounterVec // see bundle.go
	bundleSuccess   prometheus.Gauge

	// The state store's measurements (state.Observer, see store.go).
	claims        *prometheus.CounterVec
	adopted       prometheus.Counter
	leaseRenewals *prometheus.CounterVec
	storeOpDur    *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec

	mu        sync.Mutex
	escalated map[string]time.Time // proposal id → when humans were first asked
	running   map[string]struct{}  // proposal ids whose fulfilment runs as an MCP task
}

// NewMetrics registers every metric. The gauges that read live state call
// src's functions at scrape time; each may be nil until known (see Source).
func NewMetrics(src *Source) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, escalated: map[string]time.Time{}, running: map[string]struct{}{}}
	m.received = registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "fulfiller_proposals_received_total",
		Help: "Proposals addressed to this fulfiller (duplicates and others' proposals excluded)."}))
	m.proposals = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_proposals_total",
		Help: "Proposals that reached an outcome: fulfilled (request sent), rejected (by reason), withdrawn, superseded, ignored (by reason)."},
		[]string{"outcome", "reason"}))
	m.decisions = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_decisions_total",
		Help: "Policy decisions by action; failed is 1 when the policy failed closed (error, timeout, malformed decision)."}, []string{"action", "failed"}))
	m.decisionDur = registered(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fulfiller_decision_duration_seconds",
		Help: "Time to evaluate the policy for one proposal.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9)}))
	m.fulfilDur = registered(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fulfiller_fulfilment_duration_seconds",
		Help: "Time from the fulfilment mcp/request to the tool owner's mcp/response, by status (ok, error: a JSON-RPC error, tool_error: a result the tool marked isError).", Buckets: prometheus.ExponentialBuckets(0.005, 3, 10)}, []string{"status"}))
	m.approvalDur = registered(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fulfiller_approval_wait_seconds",
		Help: "Time an escalation waited for humans, by outcome (approved, rejected, withdrawn, superseded).", Buckets: prometheus.ExponentialBuckets(1, 3, 9)}, []string{"outcome"}))
	m.openEsc = registered(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "fulfiller_escalations_open", Help: "Escalations waiting for human approvers now."}))
	m.answers = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_approver_answers_total",
		Help: "Approver answers by kind: accept, decline, cancel, error, forgery (unsigned or badly signed), ignored."}, []string{"kind"}))
	m.undelivered = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_answers_undelivered_total",
		Help: "Answers that did not reach the space, by envelope kind (mcp/reject, mcp/request) and reason: not_written (no session, or our capabilities forbid it) or refused (the gateway answered system/error)."},
		[]string{"kind", "reason"}))
	m.spoofs = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_spoof_attempts_total",
		Help: "Answers that claimed another participant's name and were caught: withdraw (not from the proposer), response (a fulfilment response from a participant the request was not sent to, a second, different one from its owner, or one with a JSON-RPC id not ours: answers without an id, as reference-SDK tool servers send them, are not), discovery (two different tools/list answers)."}, []string{"kind"}))
	m.impersonations = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_impersonations_total",
		Help: "Envelopes in this fulfiller's name that it did not send (docs/design.md rule 14), by kind (mcp/reject, mcp/request, chat, …): another participant speaking as the fulfiller."}, []string{"kind"}))
	m.vetoHolders = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_veto_holders_seen_total",
		Help: "Participants seen (at start and on each join) that can end any pending proposal (mcp/reject or mcp/request tools/call) without being a known fulfiller, by role: approver, outsider."}, []string{"role"}))
	m.shadows = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_shadow_decisions_total",
		Help: "Decisions of the shadow policy (--shadow-policy), by the live decision's action (fulfill, reject, escalate) and the shadow's (the same, or error): live != shadow is a disagreement."},
		[]string{"live", "shadow"}))
	m.shadowDrops = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_shadow_dropped_total",
		Help: "Live decisions not shadowed because the shadow queue was full (or the fulfiller stopped), by the live decision's action."},
		[]string{"live"}))
	m.grants = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_grants_total",
		Help: "Grants by event: created (an approval made one), failed (an approval chose one that could not be made), used (a fulfil only a grant allowed), expired (reached its expiry unrevoked), revoked (by the operator API)."},
		[]string{"event"}))
	m.notifications = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_notifications_total",
		Help: "Notifications to approvers (run --notify) by target kind (webhook, slack, smtp) and result: sent, failed (attempts ran out, or refused for good), dropped (the queue was full, or fulfiller stopped first)."},
		[]string{"target_kind", "result"}))
	m.notifyRetries = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_notification_retries_total",
		Help: "Notification attempts after a job's first, by target kind."}, []string{"target_kind"}))
	m.tasks = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_tasks_total",
		Help: "Fulfilments run as MCP tasks, by event: created (the tool owner answered with a task, or a restart or adoption follows it again), completed, failed, cancelled (by its owner) — each relayed to the proposer —, and timeout (past its deadline), withdrawn (by the proposer), stopped (operator cancel, shutdown, store fault, the owner lost it): each sent tasks/cancel or found it gone."},
		[]string{"event"}))
	m.tasksNow = registered(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "fulfiller_tasks_running", Help: "MCP tasks being followed now (they count toward --max-pending)."}))
	m.registerStore(reg)
	m.registerBundle(reg)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(&liveCollector{src: src})
	return m
}

// Registry is the registry the metrics live in, for Handler and tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observe implements fulfill.Observer.
func (m *Metrics) Observe(e fulfill.Event) {
	switch e.Stage {
	case fulfill.StageReceived:
		m.received.Inc()
	case fulfill.StageDecided:
		if e.Decision != nil {
			failed := "0"
			if e.Decision.Err != nil {
				failed = "1"
			}
			m.decisions.WithLabelValues(string(e.Decision.Action), failed).Inc()
		}
		if e.GrantID != "" {
			m.grants.WithLabelValues("used").Inc()
		}
		if e.Input == nil || e.Input.Approval == nil { // a re-check after an edit is not a proposal's decision time
			m.decisionDur.Observe(e.Latency.Seconds())
		}
	case fulfill.StageGranted:
		if e.GrantID != "" {
			m.grants.WithLabelValues("created").Inc()
		} else {
			m.grants.WithLabelValues("failed").Inc()
		}
	case fulfill.StageShadow:
		switch r := e.Shadow; {
		case r == nil:
		case r.Dropped:
			m.shadowDrops.WithLabelValues(string(r.Live)).Inc()
		default:
			m.shadows.WithLabelValues(string(r.Live), r.ShadowAction()).Inc()
		}
	case fulfill.StageEscalated:
		m.mu.Lock()
		if _, ok := m.escalated[e.ProposalID]; !ok {
			m.escalated[e.ProposalID] = e.Time
			m.openEsc.Inc()
		}
		m.mu.Unlock()
	case fulfill.StageApproved:
		m.escalationEnded(e, "approved")
	case fulfill.StageFulfilling:
		m.proposals.WithLabelValues("fulfilled", "").Inc()
	case fulfill.StageTask:
		m.mu.Lock()
		if _, ok := m.running[e.ProposalID]; !ok {
			m.running[e.ProposalID] = struct{}{}
			m.tasksNow.Inc()
			m.tasks.WithLabelValues("created").Inc()
		}
		m.mu.Unlock()
	case fulfill.StageFulfilled:
		m.fulfilDur.WithLabelValues(fulfill.FulfilledStatus(e.Result, e.RPCError)).Observe(e.Latency.Seconds())
		if e.Task != nil {
			m.taskEnded(e, e.Task.Status)
		}
	case fulfill.StageRejected:
		m.escalationEnded(e, "rejected")
		m.proposals.WithLabelValues("rejected", e.Reason).Inc()
		if e.Reason == "timeout" {
			m.taskEnded(e, "timeout")
		} else {
			m.taskEnded(e, "stopped")
		}
	case fulfill.StageWithdrawn:
		m.escalationEnded(e, "withdrawn")
		m.proposals.WithLabelValues("withdrawn", "").Inc()
		m.taskEnded(e, "withdrawn")
	case fulfill.StageSuperseded:
		m.escalationEnded(e, "superseded")
		m.proposals.WithLabelValues("superseded", "").Inc()
	case fulfill.StageIgnored:
		m.proposals.WithLabelValues("ignored", e.Reason).Inc()
		if kind := e.SpoofKind(); kind != "" {
			m.spoofs.WithLabelValues(kind).Inc()
		}
	case fulfill.StageDiscoveryConflict:
		m.spoofs.WithLabelValues(e.SpoofKind()).Inc()
	case fulfill.StageVetoHolder:
		m.vetoHolders.WithLabelValues(e.Reason).Inc()
	case fulfill.StageImpersonated:
		m.impersonations.WithLabelValues(e.Envelope).Inc()
	case fulfill.StageUndelivered:
		// rejected and fulfilled above count only written answers; these
		// never left, or the gateway refused them afterwards.
		m.undelivered.WithLabelValues(e.Envelope, e.Reason).Inc()
	}
}

// taskEnded counts the end of e's proposal's task, if it ran as one.
func (m *Metrics) taskEnded(e fulfill.Event, event string) {
	m.mu.Lock()
	_, ok := m.running[e.ProposalID]
	delete(m.running, e.ProposalID)
	m.mu.Unlock()
	if ok {
		m.tasksNow.Dec()
		m.tasks.WithLabelValues(event).Inc()
	}
}

// escalationEnded closes the books on an open escalation, if e's proposal
// had one.
func (m *Metrics) escalationEnded(e fulfill.Event, outcome string) {
	m.mu.Lock()
	at, ok := m.escalated[e.ProposalID]
	if ok {
		delete(m.escalated, e.ProposalID)
	}
	m.mu.Unlock()
	if ok {
		m.openEsc.Dec()
		m.approvalDur.WithLabelValues(outcome).Observe(e.Time.Sub(at).Seconds())
	}
}

// ObserveApproval takes elicit's events (elicit.Config.Observer).
func (m *Metrics) ObserveApproval(e elicit.Event) {
	switch e.Kind {
	case elicit.EventAnswered:
		kind := e.Action
		if kind == "" {
			kind = "error"
		}
		m.answers.WithLabelValues(kind).Inc()
	case elicit.EventForgery:
		m.answers.WithLabelValues("forgery").Inc()
	case elicit.EventIgnored:
		m.answers.WithLabelValues("ignored").Inc()
	}
}

// GrantRevoked counts a grant the operator revoked.
func (m *Metrics) GrantRevoked() { m.grants.WithLabelValues("revoked").Inc() }

// GrantExpired counts a grant that reached its expiry unrevoked (each
// member of a group that knew it counts it).
func (m *Metrics) GrantExpired() { m.grants.WithLabelValues("expired").Inc() }

// Notification counts the end of one notification job (notify.Metrics).
func (m *Metrics) Notification(targetKind, result string) {
	m.notifications.WithLabelValues(targetKind, result).Inc()
}

// NotificationRetry counts a notification attempt after the first
// (notify.Metrics).
func (m *Metrics) NotificationRetry(targetKind string) {
	m.notifyRetries.WithLabelValues(targetKind).Inc()
}

// Source gives the live-state gauges what they read at scrape time. Its
// fields may be set once, before the HTTP server starts, or left nil while
// unknown; use SetGateway and friends when they become known later.
type Source struct {
	mu      sync.RWMutex
	gateway Gateway
	policy  Policy
	counter Counter
	audit   AuditLog
	store   StoreHealth
	keys    ApproverKeys
	grants  GrantsLoader
}

// GrantsLoader is what /readyz needs of the grants: whether those in the
// state store are loaded. *grantstore.Registry provides it.
type GrantsLoader interface {
	// Ready is closed once the stored grants are mirrored.
	Ready() <-chan struct{}
}

// SetGrants makes the grants known: /readyz is not ready until the
// store's grants are loaded (decisions wait for them meanwhile).
func (s *Source) SetGrants(g GrantsLoader) { s.mu.Lock(); s.grants = g; s.mu.Unlock() }

func (s *Source) grantsLoader() GrantsLoader {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.grants
}

// SetGateway makes the session known (after the agent has dialled).
func (s *Source) SetGateway(g Gateway) { s.mu.Lock(); s.gateway = g; s.mu.Unlock() }

// SetPolicy makes the policy engine known (after it has loaded).
func (s *Source) SetPolicy(p Policy) { s.mu.Lock(); s.policy = p; s.mu.Unlock() }

// SetCounter makes the fulfiller's counts known.
func (s *Source) SetCounter(c Counter) { s.mu.Lock(); s.counter = c; s.mu.Unlock() }

// SetAuditLog makes the decision log known (when --decision-log is set).
func (s *Source) SetAuditLog(a AuditLog) { s.mu.Lock(); s.audit = a; s.mu.Unlock() }

// SetStore makes the state store's health known (unless --state memory).
func (s *Source) SetStore(h StoreHealth) { s.mu.Lock(); s.store = h; s.mu.Unlock() }

// SetApproverKeys makes the approver keys file known (when
// --approver-keys is set).
func (s *Source) SetApproverKeys(k ApproverKeys) { s.mu.Lock(); s.keys = k; s.mu.Unlock() }

func (s *Source) approverKeys() ApproverKeys {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.keys
}

func (s *Source) storeHealth() StoreHealth {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.store
}

func (s *Source) auditLog() AuditLog {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.audit
}

func (s *Source) get() (Gateway, Policy, Counter) {
	if s == nil {
		return nil, nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gateway, s.policy, s.counter
}

var (
	descPending   = prometheus.NewDesc("fulfiller_proposals_pending", "Proposals not yet answered (deciding, awaiting approval, queued).", nil, nil)
	descInflight  = prometheus.NewDesc("fulfiller_requests_inflight", "Fulfilment requests awaiting the tool owner's response.", nil, nil)
	descConnected = prometheus.NewDesc("fulfiller_gateway_connected", "1 while the agent has a welcomed session with the gateway.", nil, nil)
	descReconnect = prometheus.NewDesc("fulfiller_gateway_reconnects_total", "Sessions re-established after a loss.", nil, nil)
	descLost      = prometheus.NewDesc("fulfiller_gateway_sessions_lost_total", "Sessions that ended for any reason but shutdown.", nil, nil)
	descFrames    = prometheus.NewDesc("fulfiller_gateway_frames_received_total", "WebSocket messages read.", nil, nil)
	descOversized = prometheus.NewDesc("fulfiller_gateway_frames_oversized_total", "Frames over --max-frame, discarded unread.", nil, nil)
	descMalformed = prometheus.NewDesc("fulfiller_gateway_frames_malformed_total", "Text frames that were not MEW envelopes.", nil, nil)
	descSends     = prometheus.NewDesc("fulfiller_gateway_envelopes_sent_total", "Envelopes written to the gateway.", nil, nil)
	descPolicy    = prometheus.NewDesc("fulfiller_policy_info", "The policy set in force: its content revision; default is true for the built-in reject-all policy.", []string{"revision", "default"}, nil)
	descReloadErr = prometheus.NewDesc("fulfiller_policy_reload_failing", "1 while the last policy reload failed (the previous policy stays in force).", nil, nil)

	descKeysFailures = prometheus.NewDesc("fulfiller_approver_keys_reload_failures_total", "Changes to the --approver-keys file that were refused (unreadable, or a line that does not parse): the last good keys stay in force.", nil, nil)
	descKeysFailing  = prometheus.NewDesc("fulfiller_approver_keys_reload_failing", "1 while the last change to the --approver-keys file was refused (the last good keys stay in force).", nil, nil)

	descAuditFailures = prometheus.NewDesc("fulfiller_decision_log_write_failures_total", "Writes (or fsyncs) of the decision log that failed; while it fails, fulfilments and escalations are refused.", nil, nil)
	descAuditFailing  = prometheus.NewDesc("fulfiller_decision_log_failing", "1 while the decision log cannot be written.", nil, nil)
	descStoreFailing  = prometheus.NewDesc("fulfiller_state_store_failing", "1 while the state store does not accept writes (the last background probe failed); 0 when it does. Absent with --state memory.", nil, nil)
	descAuditDropped  = prometheus.NewDesc("fulfiller_decision_log_records_dropped_total", "Decision log records lost because the log failed so long that its backlog filled up.", nil, nil)
)

// liveCollector reads state owned elsewhere at scrape time, so nothing is
// copied on the hot path.
type liveCollector struct{ src *Source }

func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descInflight, descConnected, descReconnect, descLost, descFrames, descOversized, descMalformed, descSends, descPolicy, descReloadErr} {
		ch <- d
	}
	ch <- descAuditFailures
	ch <- descAuditFailing
	ch <- descAuditDropped
	ch <- descStoreFailing
	ch <- descKeysFailures
	ch <- descKeysFailing
}

func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	gw, pol, cnt := c.src.get()
	if cnt != nil {
		pending, inflight := cnt.Counts()
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(pending))
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(inflight))
	}
	if gw != nil {
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, boolFloat(gw.Connected()))
		s := gw.Stats()
		ch <- prometheus.MustNewConstMetric(descReconnect, prometheus.CounterValue, float64(s.Reconnects))
		ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(s.SessionsLost))
		ch <- prometheus.MustNewConstMetric(descFrames, prometheus.CounterValue, float64(s.FramesIn))
		ch <- prometheus.MustNewConstMetric(descOversized, prometheus.CounterValue, float64(s.Oversized))
		ch <- prometheus.MustNewConstMetric(descMalformed, prometheus.CounterValue, float64(s.Malformed))
		ch <- prometheus.MustNewConstMetric(descSends, prometheus.CounterValue, float64(s.Sends))
	} else {
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, 0)
	}
	if pol != nil {
		def := "false"
		if pol.IsDefault() {
			def = "true"
		}
		ch <- prometheus.MustNewConstMetric(descPolicy, prometheus.GaugeValue, 1, pol.Revision(), def)
		ch <- prometheus.MustNewConstMetric(descReloadErr, prometheus.GaugeValue, boolFloat(pol.LastReloadError() != nil))
	}
	if a := c.src.auditLog(); a != nil {
		ch <- prometheus.MustNewConstMetric(descAuditFailures, prometheus.CounterValue, float64(a.WriteFailures()))
		ch <- prometheus.MustNewConstMetric(descAuditFailing, prometheus.GaugeValue, boolFloat(a.Healthy() != nil))
		ch <- prometheus.MustNewConstMetric(descAuditDropped, prometheus.CounterValue, float64(a.Dropped()))
	}
	if st := c.src.storeHealth(); st != nil {
		ch <- prometheus.MustNewConstMetric(descStoreFailing, prometheus.GaugeValue, boolFloat(st.Healthy() != nil))
	}
	if k := c.src.approverKeys(); k != nil {
		ch <- prometheus.MustNewConstMetric(descKeysFailures, prometheus.CounterValue, float64(k.ReloadFailures()))
		ch <- prometheus.MustNewConstMetric(descKeysFailing, prometheus.GaugeValue, boolFloat(k.LastReloadError() != nil))
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// registered registers c with reg and returns it, so that each metric is
// made and registered in one statement.
func registered[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	reg.MustRegister(c)
	return c
}

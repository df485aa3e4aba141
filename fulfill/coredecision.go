package fulfill

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// coreDecision is the lifecycle's view of the policy's decision d, routed
// to route ("" while not routed): what the core acts on, with the whole
// decision kept in Extra as the record stores it (storedDecision), for
// the prompts (editable fields, grants, reminders, tiers,
// notify_arguments) and whoever resumes the record. hinted: the
// proposal's deadline hint set the approval deadline (d.Timeout is then
// the time left until it).
func coreDecision(d decision.Decision, route string, hinted bool) lifecycle.Decision {
	extra := storedExtra(d, route, hinted)
	return lifecycle.Decision{Action: lifecycle.Action(d.Action), Reason: d.Reason, Message: d.Message, Target: route,
		Approvers: d.Approvers, Quorum: d.Quorum, Timeout: d.Timeout, Revision: d.Revision,
		Task: d.Task, TaskTimeout: d.TaskTimeout, Editable: d.Editable, Grantable: d.Grantable,
		NotifyArguments: d.NotifyArguments, Reminders: d.Reminders, EscalateTo: d.EscalateTo, Extra: extra}
}

// policyDecision reads back what coreDecision kept of the policy's
// decision (its Extra), with what the core changed since: the route.
// ok is false for a decision without Extra (none yet).
func policyDecision(d *lifecycle.Decision) (sd storedDecision, ok bool) {
	if d == nil || len(d.Extra) == 0 || agent.Unmarshal(d.Extra, &sd) != nil {
		return storedDecision{}, false
	}
	sd.Route = d.Target
	return sd, true
}

// storedDecisionOf is what a record keeps of decision d (see
// storedDecision).
func storedDecisionOf(d decision.Decision, route string, params json.RawMessage, by []string) storedDecision {
	return storedDecision{Action: d.Action, Reason: d.Reason, Message: d.Message, Target: d.Target,
		Approvers: d.Approvers, Quorum: d.Quorum, Timeout: d.Timeout, Editable: d.Editable, Grantable: d.Grantable, Revision: d.Revision,
		Task: d.Task, TaskTimeout: d.TaskTimeout, NotifyArguments: d.NotifyArguments, Reminders: d.Reminders, EscalateTo: d.EscalateTo,
		Route: route, Params: params, ApprovedBy: by}
}

// storedExtra is what coreDecision keeps in Extra: d routed to route as
// a record stores it (storedDecision), as JSON. A plain decision (none
// of the lists and offers an escalation carries) is marshalled once:
// the policy makes the same few decisions call after call, and the JSON
// of one was a tenth of the policy step's own CPU on an allowed call.
func storedExtra(d decision.Decision, route string, hinted bool) json.RawMessage {
	k, plain := plainKeyOf(d, route, hinted)
	if plain {
		if extra, ok := plainExtras.get(k); ok {
			return extra
		}
	}
	sd := storedDecisionOf(d, route, nil, nil)
	sd.DeadlineByProposer = hinted
	extra, _ := json.Marshal(sd)
	if plain {
		plainExtras.put(k, extra)
	}
	return extra
}

// plainKey is all a plain decision's storedDecision holds (see
// plainKeyOf): equal keys marshal to the same JSON.
type plainKey struct {
	action                  decision.Action
	reason, message, target string
	quorum                  int
	timeout, taskTimeout    time.Duration
	task, notify, hinted    bool
	revision, route         string
}

// plainKeyOf is d's plainKey; plain is false when d has a list or an
// offer (approvers, editable, grantable, reminders, escalate_to), which
// no comparable key holds.
func plainKeyOf(d decision.Decision, route string, hinted bool) (k plainKey, plain bool) {
	if len(d.Approvers) > 0 || len(d.Editable) > 0 || d.Grantable != nil || len(d.Reminders) > 0 || len(d.EscalateTo) > 0 {
		return plainKey{}, false
	}
	return plainKey{action: d.Action, reason: d.Reason, message: d.Message, target: d.Target, quorum: d.Quorum,
		timeout: d.Timeout, taskTimeout: d.TaskTimeout, task: d.Task, notify: d.NotifyArguments, hinted: hinted,
		revision: d.Revision, route: route}, true
}

// plainExtras are the plain decisions' Extra, by key.
var plainExtras = extraMemo{max: 256}

// extraMemo is a bounded memo of the JSON of plain decisions, emptied
// when full (a policy whose messages differ call by call gains nothing
// from it and loses one marshal's worth of map work). Its values are
// shared by the decisions made with them: read, never written.
type extraMemo struct {
	max int
	mu  sync.Mutex
	m   map[plainKey]json.RawMessage
}

func (c *extraMemo) get(k plainKey) (json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *extraMemo) put(k plainKey, v json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[plainKey]json.RawMessage, c.max)
	}
	c.m[k] = v
}

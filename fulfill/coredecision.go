package fulfill

import (
	"encoding/json"

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
	sd := storedDecisionOf(d, route, nil, nil)
	sd.DeadlineByProposer = hinted
	extra, _ := json.Marshal(sd)
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

package fulfiller_test

import data.fulfiller

call(proposer, name, annotations, arguments) := {
	"method": "tools/call",
	"params": {"name": name, "arguments": arguments},
	"tool": {"name": name, "server": "fs", "annotations": annotations, "arguments": arguments},
	"proposer": {"id": proposer},
	"agent": {"id": "fulfiller", "pending": 1, "inflight": 0, "max_pending": 1000},
}

test_read_only_call_is_fulfilled if {
	fulfiller.decision == {"action": "fulfill", "message": "read-only"} with input as call("coder", "read_file", {}, {"path": "/tmp/notes.txt"})
}

test_production_write_is_escalated if {
	fulfiller.decision == {
		"action": "escalate",
		"message": "write_file targets production (/srv/prod/app.conf)",
		"approvers": ["oncall-alice", "oncall-bob", "oncall-carol"],
		"quorum": 2,
		"timeout": "4m",
	} with input as call("coder", "write_file", {}, {"path": "/srv/prod/app.conf"})
}

test_escalate_beats_fulfil if {
	# Reading production data is read-only, but production still needs a human.
	fulfiller.decision.action == "escalate" with input as call("coder", "read_file", {"readOnlyHint": true}, {"path": "/srv/prod/secrets"})
}

test_deny_beats_escalate if {
	fulfiller.decision == {
		"action": "reject",
		"reason": "policy",
		"message": "proposals from mallory are not accepted here",
	} with input as call("mallory", "write_file", {}, {"path": "/srv/prod/app.conf"})
}

test_busy_beats_fulfil if {
	fulfiller.decision.reason == "busy" with input as object.union(
		call("coder", "read_file", {}, {"path": "/tmp/x"}),
		{"agent": {"pending": 51}},
	)
}

test_anything_else_is_rejected if {
	fulfiller.decision == {
		"action": "reject",
		"reason": "policy",
		"message": "no rule allows this call; ask the security team to extend the policy",
	} with input as call("coder", "write_file", {}, {"path": "/tmp/notes.txt"})
}

test_empty_input_is_rejected if {
	fulfiller.decision.action == "reject" with input as {}
}

test_grant_beats_escalate if {
	d := fulfiller.decision with input as object.union(
		call("coder", "read_file", {"readOnlyHint": true}, {"path": "/srv/prod/logs/app.log"}),
		{"grants": [{"id": "grant-1", "proposer": "coder", "tool": "read_file", "granted_by": "oncall-alice", "expires": "2026-11-25T10:00:00Z"}]},
	)
	d.action == "fulfill"
}

test_deny_beats_grant if {
	fulfiller.decision.reason == "policy" with input as object.union(
		call("mallory", "read_file", {"readOnlyHint": true}, {"path": "/srv/prod/logs/app.log"}),
		{"grants": [{"id": "grant-1", "proposer": "mallory", "tool": "read_file", "granted_by": "oncall-alice", "expires": "2026-11-25T10:00:00Z"}]},
	)
}

# A committed suggestion (fulfiller suggest) fulfils what it covers, after
# deny and escalate.
suggestion := {"coder_write_file": {"fulfill": true}}

test_suggestion_fulfils if {
	fulfiller.decision == {"action": "fulfill", "message": "suggested rule"} with input as call("coder", "write_file", {}, {"path": "/tmp/notes.txt"})
		with data.fulfiller.suggested as suggestion
}

test_suggestion_never_beats_escalate_or_deny if {
	fulfiller.decision.action == "escalate" with input as call("coder", "write_file", {}, {"path": "/srv/prod/app.conf"})
		with data.fulfiller.suggested as suggestion
	fulfiller.decision.action == "reject" with input as call("mallory", "write_file", {}, {"path": "/tmp/x"})
		with data.fulfiller.suggested as suggestion
}

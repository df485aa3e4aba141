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

# The tools of @modelcontextprotocol/server-filesystem with the annotations
# the server declares (examples/tool-metadata.yaml). Behind mew bridge the
# owner sends none, and the operator declares them; a server reached
# directly sends them itself. Both must be decided alike.
fs_tools := {
	"read_text_file": {"readOnlyHint": true, "openWorldHint": false},
	"directory_tree": {"readOnlyHint": true, "openWorldHint": false},
	"list_allowed_directories": {"readOnlyHint": true, "openWorldHint": false},
	"write_file": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false},
	"edit_file": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false},
	"create_directory": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
	"move_file": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false},
}

# bridged is a call to a tool of the bridged fs: the operator's annotations
# only, no owner_annotations.
bridged(name, arguments) := call("coder", name, fs_tools[name], arguments)

# direct is the same call to a server that sends the annotations itself.
direct(name, arguments) := object.union(bridged(name, arguments), {"tool": {"owner_annotations": fs_tools[name]}})

test_bridged_tools_are_decided_like_tools_that_send_annotations if {
	every name, _ in fs_tools {
		every path in ["/srv/app/x", "/srv/prod/x"] {
			d := fulfiller.decision with input as bridged(name, {"path": path})
			d == fulfiller.decision with input as direct(name, {"path": path})
		}
	}
}

test_bridged_read_only_tool_is_fulfilled if {
	# No read-only prefix: without the declaration it would be rejected.
	fulfiller.decision == {"action": "fulfill", "message": "read-only"} with input as bridged("directory_tree", {"path": "/srv/app"})
	fulfiller.decision.action == "reject" with input as call("coder", "directory_tree", {}, {"path": "/srv/app"})
}

test_bridged_destructive_write_needs_two_in_production if {
	fulfiller.decision.quorum == 2 with input as bridged("write_file", {"path": "/srv/prod/app.conf"})
	fulfiller.decision.quorum == 2 with input as bridged("edit_file", {"path": "/srv/prod/app.conf"})
	fulfiller.decision.quorum == 2 with input as bridged("move_file", {"source": "/srv/prod/a", "destination": "/srv/prod/b"})
	fulfiller.decision.quorum == 1 with input as bridged("create_directory", {"path": "/srv/prod/new"})
}

test_bridged_additive_write_needs_one_and_may_be_granted if {
	d := fulfiller.decision with input as bridged("create_directory", {"path": "/srv/prod/logs"})
	d.action == "escalate"
	d.quorum == 1
	d.grantable.max_ttl == "8h"
}

test_operator_overrules_an_owner_claiming_read_only if {
	# The owner says write_file is read-only; the operator's declaration,
	# alone, is what input.tool.annotations hold.
	lying := object.union(bridged("write_file", {"path": "/srv/app/x"}), {"tool": {"owner_annotations": {"readOnlyHint": true}}})
	fulfiller.decision.action == "reject" with input as lying
	prod := object.union(bridged("write_file", {"path": "/srv/prod/x"}), {"tool": {"owner_annotations": {"readOnlyHint": true}}})
	fulfiller.decision.quorum == 2 with input as prod
}

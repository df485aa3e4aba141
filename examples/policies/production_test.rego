package fulfiller.production_test

import data.fulfiller.production

call(name, annotations, arguments) := {
	"method": "tools/call",
	"tool": {"name": name, "annotations": annotations, "arguments": arguments},
}

test_production_path_escalates_to_on_call if {
	production.escalate == {
		"action": "escalate",
		"message": "write_file targets production (/srv/prod/app.conf)",
		"approvers": ["oncall-alice", "oncall-bob", "oncall-carol"],
		"quorum": 2,
		"timeout": "4m",
	} with input as call("write_file", {}, {"path": "/srv/prod/app.conf", "content": "x"})
}

# The path is checked as the file system will read it (paths.clean): an
# encoded, doubled or dotted path to production is production.
test_encoded_production_path_escalates if {
	production.matches == {"/srv/prod/db"} with input as call("read_file", {}, {"path": "/srv/%70rod/db"})
	production.escalate.message == "read_file targets production (/srv/prod/db)" with input as call("read_file", {}, {"path": "/srv/%70rod/db"})
}

test_dotted_and_doubled_production_paths_escalate if {
	production.escalate with input as call("read_file", {}, {"path": "/srv/app/%2e%2e//%70roduction/db"})
	production.escalate with input as call("read_file", {}, {"path": "/srv/app/..//prod/db"})
}

test_a_path_that_leaves_production_is_still_asked_about if {
	# It names production; whether it reads there, a human decides.
	production.escalate with input as call("read_file", {}, {"path": "/srv/prod/../app/config.yaml"})
}

test_nested_arguments_are_searched if {
	production.escalate.quorum == 2 with input as call("deploy", {}, {"target": {"envs": ["staging", "Production"]}})
}

test_case_does_not_matter if {
	production.matches == {"DB-PROD-1"} with input as call("query", {}, {"host": "DB-PROD-1"})
}

test_aws_account_pattern if {
	production.escalate with input as call("s3_put", {}, {"bucket": "arn:aws:s3:eu-west-1:111122223333:backups"})
}

test_account_number_elsewhere_is_not_production if {
	# The pattern, not just the quick `contains` filter, decides.
	not production.escalate with input as call("note", {}, {"text": "ticket 111122223333"})
}

test_non_destructive_tool_needs_one_approval if {
	production.escalate.quorum == 1 with input as call("restart", {"destructiveHint": false}, {"host": "web1.prod.example.com"})
}

test_read_only_tool_needs_one_approval if {
	production.escalate.quorum == 1 with input as call("read_logs", {"readOnlyHint": true}, {"host": "prod-db-1"})
}

test_staging_does_not_escalate if {
	not production.escalate with input as call("write_file", {}, {"path": "/srv/staging/app.conf"})
}

test_words_containing_prod_do_not_match if {
	not production.escalate with input as call("list_products", {}, {"query": "products reproduce"})
}

test_targets_come_from_data if {
	production.escalate with input as call("query", {}, {"db": "payments-live"})
		with data.settings.production.targets as [{"contains": "live", "pattern": "-live$"}]
}

test_contains_words_are_plain_lower_case if {
	# The quick look at the JSON text of the arguments finds a word only if
	# JSON does not escape it, and only in lower case.
	every target in data.settings.production.targets {
		regex.match(`^[a-z0-9 ._/:=@-]+$`, target.contains)
	}
}

test_json_escaped_text_still_matches if {
	production.escalate with input as call("write", {}, {"path": "/srv/prod/<x>\"y\""})
}

# Grants (docs/design.md "Grants").

grant := {
	"id": "grant-1",
	"proposer": "coder",
	"tool": "read_file",
	"granted_by": "oncall-alice",
	"expires": "2026-11-25T10:00:00Z",
}

read_call(arguments) := object.union(call("read_file", {"readOnlyHint": true}, arguments), {"proposer": {"id": "coder"}})

test_one_approver_call_with_a_path_is_grantable if {
	production.escalate.grantable == {"max_ttl": "8h", "scope": ["proposer", "tool", "arguments.path:prefix"]} with input as read_call({"path": "/srv/prod/logs/app.log"})
}

test_destructive_call_is_never_grantable if {
	e := production.escalate with input as call("delete_path", {}, {"path": "/srv/prod/db"})
	e.quorum == 2
	not e.grantable
}

test_call_without_a_path_is_not_grantable if {
	e := production.escalate with input as call("restart", {"destructiveHint": false}, {"host": "web1.prod.example.com"})
	e.quorum == 1
	not e.grantable
}

test_live_grant_lets_the_call_through if {
	production.granted == {
		"action": "fulfill",
		"message": "read_file targets production; allowed by oncall-alice's grant grant-1 until 2026-11-25T10:00:00Z",
	} with input as object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"grants": [grant]})
}

test_grant_without_a_proposer_lets_anyone_through if {
	unpinned := object.remove(grant, ["proposer"])
	production.granted.action == "fulfill" with input as object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"grants": [unpinned]})
	production.granted.action == "fulfill" with input as object.union(
		object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"proposer": {"id": "other"}}),
		{"grants": [unpinned]},
	)
}

test_no_grant_no_pass if {
	not production.granted with input as object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"grants": []})
	not production.granted with input as read_call({"path": "/srv/prod/logs/app.log"})
}

test_grant_never_passes_a_destructive_call if {
	# A grant made under an older, wider policy: this one still asks two.
	not production.granted with input as object.union(
		object.union(call("delete_path", {}, {"path": "/srv/prod/db"}), {"proposer": {"id": "coder"}}),
		{"grants": [object.union(grant, {"tool": "delete_path"})]},
	)
}

test_grant_for_another_proposer_or_tool_does_not_pass if {
	not production.granted with input as object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"grants": [object.union(grant, {"proposer": "mallory"})]})
	not production.granted with input as object.union(read_call({"path": "/srv/prod/logs/app.log"}), {"grants": [object.union(grant, {"tool": "read_secret"})]})
}

paged_targets := [
	{"contains": "prod", "pattern": "\\bprod(uction)?\\b"},
	{"contains": "payments", "pattern": "^/srv/prod/payments/", "reminders": ["1m"], "escalate_to": [{"after": "2m", "approvers": ["sre-lead"]}]},
]

test_a_paged_target_adds_reminders_and_a_tier if {
	d := production.escalate with input as call("restart", {"destructiveHint": false}, {"path": "/srv/prod/payments/api"})
		with data.settings.production.targets as paged_targets
	d.reminders == ["1m"]
	d.escalate_to == [{"after": "2m", "approvers": ["sre-lead"]}]
	d.approvers == ["oncall-alice", "oncall-bob", "oncall-carol"]
}

test_other_production_calls_are_not_paged if {
	d := production.escalate with input as call("restart", {"destructiveHint": false}, {"path": "/srv/prod/api"})
		with data.settings.production.targets as paged_targets
	not d.reminders
	not d.escalate_to
}

test_two_paged_targets_for_one_call_add_nothing if {
	targets := array.concat(paged_targets, [{"contains": "api", "pattern": "/api$", "reminders": ["3m"]}])
	d := production.escalate with input as call("restart", {"destructiveHint": false}, {"path": "/srv/prod/payments/api"})
		with data.settings.production.targets as targets
	not d.reminders
	not d.escalate_to
}

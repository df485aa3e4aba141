package fulfiller.quotas_test

import data.fulfiller.quotas

load(proposer, pending) := {
	"proposer": {"id": proposer},
	"agent": {"id": "fulfiller", "pending": pending, "inflight": 0, "max_pending": 1000},
}

test_busy_over_threshold if {
	quotas.deny == {
		"action": "reject",
		"reason": "busy",
		"message": "51 proposals are waiting (limit 50); try again later",
	} with input as load("coder", 51)
}

test_not_busy_at_threshold if {
	not quotas.deny with input as load("coder", 50)
}

test_unknown_load_is_not_busy if {
	# `fulfiller eval` on a bare envelope has no input.agent.
	not quotas.deny with input as {"proposer": {"id": "coder"}}
}

test_blocklisted_proposer_is_refused if {
	quotas.deny == {
		"action": "reject",
		"reason": "policy",
		"message": "proposals from mallory are not accepted here",
	} with input as load("mallory", 0)
}

test_blocklist_wins_over_busy if {
	quotas.deny.reason == "policy" with input as load("mallory", 999)
}

test_threshold_comes_from_data if {
	quotas.deny.reason == "busy" with input as load("coder", 3)
		with data.settings.quotas.max_pending as 2
}

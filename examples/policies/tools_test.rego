package fulfiller.tools_test

import data.fulfiller.tools

test_missing_annotations_mean_destructive_and_not_read_only if {
	tools.destructive with input as {"tool": {"name": "write_file"}}
	not tools.read_only with input as {"tool": {"name": "write_file"}}
}

test_empty_annotations_get_the_same_defaults if {
	tools.destructive with input as {"tool": {"name": "write_file", "annotations": {}}}
}

test_destructive_hint_false_is_respected if {
	not tools.destructive with input as {"tool": {"name": "touch", "annotations": {"destructiveHint": false}}}
}

test_read_only_tool_is_not_destructive if {
	tools.read_only with input as {"tool": {"name": "stat", "annotations": {"readOnlyHint": true}}}
	not tools.destructive with input as {"tool": {"name": "stat", "annotations": {"readOnlyHint": true}}}
	not tools.destructive with input as {"tool": {"name": "stat", "annotations": {"readOnlyHint": true, "destructiveHint": false}}}
}

test_both_hints_true_is_destructive if {
	# A tool whose annotations say both is destructive, never read-only:
	# one of the two is a lie, and the cautious one wins (issue 41, row 3).
	both := {"tool": {"name": "stat", "annotations": {"readOnlyHint": true, "destructiveHint": true}}}
	not tools.read_only with input as both
	tools.destructive with input as both
}

test_only_true_is_read_only if {
	not tools.read_only with input as {"tool": {"name": "x", "annotations": {"readOnlyHint": "yes"}}}
}

test_declared_read_only_hint_is_a_declaration if {
	tools.read_only_declared with input as {"tool": {"name": "x", "annotations": {"readOnlyHint": false}}}
	tools.read_only_declared with input as {"tool": {"name": "x", "annotations": {"readOnlyHint": true}}}
	not tools.read_only_declared with input as {"tool": {"name": "x", "annotations": {"destructiveHint": true}}}
	not tools.read_only_declared with input as {"tool": {"name": "x"}}
	not tools.read_only_declared with input as {"tool": {"name": "x", "annotations": {"readOnlyHint": "yes"}}}
}

test_operator_annotations_decide_not_the_owners if {
	# input.tool.annotations already hold the operator's annotations alone:
	# owner_annotations are for the record, never read here.
	lying := {"tool": {
		"name": "write_file",
		"annotations": {"readOnlyHint": false, "destructiveHint": true},
		"owner_annotations": {"readOnlyHint": true},
	}}
	not tools.read_only with input as lying
	tools.destructive with input as lying
}

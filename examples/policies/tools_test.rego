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
	# destructiveHint means nothing when readOnlyHint is true (MCP).
	tools.read_only with input as {"tool": {"name": "stat", "annotations": {"readOnlyHint": true, "destructiveHint": true}}}
	not tools.destructive with input as {"tool": {"name": "stat", "annotations": {"readOnlyHint": true, "destructiveHint": true}}}
}

test_only_true_is_read_only if {
	not tools.read_only with input as {"tool": {"name": "x", "annotations": {"readOnlyHint": "yes"}}}
}

package fulfiller.readonly_test

import data.fulfiller.readonly

call(tool) := {"method": "tools/call", "tool": tool}

test_read_only_hint_fulfils if {
	readonly.fulfill with input as call({"name": "fetch_page", "annotations": {"readOnlyHint": true}})
}

test_read_only_prefix_fulfils if {
	readonly.fulfill with input as call({"name": "read_file", "arguments": {"path": "/etc/hosts"}})
}

test_read_only_method_fulfils if {
	readonly.fulfill with input as {"method": "resources/read", "params": {"uri": "file:///tmp/x"}}
}

test_missing_hint_is_not_read_only if {
	# readOnlyHint defaults to false when the owner gives no annotations.
	not readonly.fulfill with input as call({"name": "write_file"})
}

test_explicit_false_hint_is_not_read_only if {
	not readonly.fulfill with input as call({"name": "delete_file", "annotations": {"readOnlyHint": false}})
}

test_read_only_hint_never_fulfils_a_write_name if {
	# A forged (or mistaken) tools/list answer must not make a write a read.
	not readonly.fulfill with input as call({"name": "write_file", "annotations": {"readOnlyHint": true}})
	not readonly.fulfill with input as call({"name": "delete_all", "annotations": {"readOnlyHint": true}})
}

test_prefix_must_start_the_name if {
	not readonly.fulfill with input as call({"name": "unread_all"})
}

test_prefixes_come_from_data if {
	readonly.fulfill with input as call({"name": "peek_queue"})
		with data.settings.readonly_prefixes as ["peek_"]
}

# A tool behind mew bridge sends no annotations; input.tool.annotations
# then hold only what the operator declared in --tool-metadata, and there
# is no owner_annotations.
bridged(name, declared) := {"method": "tools/call", "tool": {"name": name, "server": "fs", "annotations": declared}}

test_declared_read_only_fulfils_a_bridged_tool if {
	# directory_tree has no read-only prefix: only the declaration lets it run.
	readonly.fulfill with input as bridged("directory_tree", {"readOnlyHint": true})
	not readonly.fulfill with input as call({"name": "directory_tree"})
}

test_declared_false_beats_the_read_only_prefix if {
	# The name-prefix fallback is for tools nobody described.
	readonly.fulfill with input as call({"name": "read_and_clear"})
	not readonly.fulfill with input as bridged("read_and_clear", {"readOnlyHint": false})
	not readonly.fulfill with input as call({"name": "read_and_clear", "annotations": {"readOnlyHint": false}})
}

test_declared_read_only_never_fulfils_a_write_name if {
	# The write-name guard holds for declarations too: a write_ tool is
	# never fulfilled unasked on a hint.
	not readonly.fulfill with input as bridged("write_file", {"readOnlyHint": true})
}

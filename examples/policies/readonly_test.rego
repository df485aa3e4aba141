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

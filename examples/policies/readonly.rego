# METADATA
# title: Read-only calls
# description: Calls that only read may run without asking anyone.
package fulfiller.readonly

import data.fulfiller.tools

# MCP methods that only read (tools/list, resources/read, …).
fulfill if input.method in data.settings.readonly_methods

# Tools their owner annotates as read-only …
fulfill if {
	input.method == "tools/call"
	tools.read_only
}

# … or whose name starts with one of the read-only prefixes in data.
fulfill if {
	input.method == "tools/call"
	strings.any_prefix_match(input.tool.name, data.settings.readonly_prefixes)
}

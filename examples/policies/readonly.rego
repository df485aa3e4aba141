# METADATA
# title: Read-only calls
# description: Calls that only read may run without asking anyone.
package fulfiller.readonly

import data.fulfiller.tools

# MCP methods that only read (tools/list, resources/read, …).
fulfill if input.method in data.settings.readonly_methods

# Tools their owner annotates as read-only, unless their name says they
# write: an annotation is a hint (MCP says so) that anyone able to answer
# tools/list in the owner's name could have written, so it never turns a
# write_file into a read on its own …
fulfill if {
	input.method == "tools/call"
	tools.read_only
	not write_capable
}

# … or whose name starts with one of the read-only prefixes in data.
fulfill if {
	input.method == "tools/call"
	strings.any_prefix_match(input.tool.name, data.settings.readonly_prefixes)
}

# The tool's name says it changes something.
write_capable if strings.any_prefix_match(input.tool.name, data.settings.write_prefixes)

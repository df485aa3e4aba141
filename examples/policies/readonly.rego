# METADATA
# title: Read-only calls
# description: Calls that only read may run without asking anyone.
package fulfiller.readonly

import data.fulfiller.tools

# MCP methods that only read (tools/list, resources/read, …).
fulfill if input.method in data.settings.readonly_methods

# Tools annotated read-only — by their owner, or by the operator in
# --tool-metadata (examples/tool-metadata.yaml declares the tools of the
# filesystem server behind `mew bridge`, which sends no annotations) —
# unless their name says they write: an owner's annotation is a hint (MCP
# says so) that anyone able to answer tools/list in the owner's name could
# have written, so it never turns a write_file into a read on its own …
fulfill if {
	input.method == "tools/call"
	tools.read_only
	not write_capable
}

# … or, for a tool nobody described (no readOnlyHint from its owner or the
# operator), whose name starts with one of the read-only prefixes in data.
# This fallback is a guess from the name: it is what lets read_file behind
# a bridge run without --tool-metadata, and it would let a badly named
# read_and_delete run too. A declared readOnlyHint: false always wins over
# the name; declare your tools and trim readonly_prefixes to taste.
fulfill if {
	input.method == "tools/call"
	not tools.read_only_declared
	strings.any_prefix_match(input.tool.name, data.settings.readonly_prefixes)
}

# The tool's name says it changes something.
write_capable if strings.any_prefix_match(input.tool.name, data.settings.write_prefixes)

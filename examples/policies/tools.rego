# METADATA
# title: Tool facts
# description: |
#   What the other example policies need to know about the tool a proposal
#   calls, with MCP's defaults applied to missing annotations.
package fulfiller.tools

# input.tool.annotations are, for a tool the operator declares (fulfiller
# run --tool-metadata), the operator's annotations alone — the owner adds
# nothing to them — and for any other tool the owner's annotations from
# tools/list; input.tool.owner_annotations are the owner's alone, for the
# record. A tool behind `mew bridge` sends none, so for it annotations are
# absent unless the operator declared some. MCP's defaults for a tool that
# says nothing are the cautious ones — readOnlyHint false, destructiveHint
# true — and applying them is the policy's job. An owner's annotations are
# its claims: trust them as far as you trust the participant that owns the
# tool, and declare the ones that matter in the tool-metadata file.

# readOnlyHint is false when absent. A tool whose annotations also say
# destructiveHint: true is not read-only: one of the two is a lie, and the
# cautious one wins.
read_only if {
	input.tool.annotations.readOnlyHint == true
	not input.tool.annotations.destructiveHint == true
}

# Somebody — the owner or the operator — said whether the tool is
# read-only. Where nobody did, readonly.rego falls back on the tool's name.
read_only_declared if is_boolean(input.tool.annotations.readOnlyHint)

# destructiveHint is true when absent, and only means something for a tool
# that is not read-only.
destructive if {
	not read_only
	object.get(input.tool, ["annotations", "destructiveHint"], true) == true
}

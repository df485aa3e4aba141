# METADATA
# title: Tool facts
# description: |
#   What the other example policies need to know about the tool a proposal
#   calls, with MCP's defaults applied to missing annotations.
package fulfiller.tools

# fulfiller passes the tool owner's annotations verbatim, and leaves them out
# when the owner gave none. MCP's defaults for a tool that says nothing are
# the cautious ones — readOnlyHint false, destructiveHint true — and applying
# them is the policy's job. Annotations are the owner's claims: trust them as
# far as you trust the participant that owns the tool.

# readOnlyHint is false when absent.
read_only if input.tool.annotations.readOnlyHint == true

# destructiveHint is true when absent, and only means something for a tool
# that is not read-only.
destructive if {
	not read_only
	object.get(input.tool, ["annotations", "destructiveHint"], true) == true
}

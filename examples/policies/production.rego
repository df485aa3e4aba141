# METADATA
# title: Production needs a human
# description: |
#   A call whose arguments point at production is escalated to the on-call
#   approvers; destructive tools need two of them to agree.
package fulfiller.production

import data.fulfiller.tools

# A cheap first look at the arguments as one lower-case text: most calls
# contain none of the targets' `contains` words and stop here, without
# visiting each argument. (JSON escapes only quotes, backslashes, control
# characters and <>&, which the `contains` words never hold: a data test
# checks that.)
argument_text := lower(json.marshal(input.tool.arguments))

# The argument strings, at any depth, that match a production target.
matches contains s if {
	some target in data.settings.production.targets
	contains(argument_text, target.contains)
	walk(input.tool.arguments, [_, s])
	is_string(s)
	lowered := lower(s)
	contains(lowered, target.contains)
	regex.match(target.pattern, lowered)
}

default quorum := 1

# Destructive tools (the default, see tools.rego) need two approvals.
quorum := 2 if tools.destructive

escalate := {
	"action": "escalate",
	"message": sprintf("%s targets production (%s)", [input.tool.name, concat(", ", sort(matches))]),
	"approvers": data.settings.production.approvers,
	"quorum": quorum,
	"timeout": data.settings.production.timeout,
} if count(matches) > 0

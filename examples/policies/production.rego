# METADATA
# title: Production needs a human
# description: |
#   A call whose arguments point at production is escalated to the on-call
#   approvers; destructive tools need two of them to agree. For the others
#   an approver may grant "calls like this for a while", and a live grant
#   lets such a call through without asking.
package fulfiller.production

import data.fulfiller.paths
import data.fulfiller.tools

# The path argument as the file system will read it (paths.rego): an
# encoded /srv/%70rod/db is /srv/prod/db, and production. A path that
# cleans to itself adds nothing.
default clean_path := ""

clean_path := paths.clean(input.tool.arguments.path) if is_string(input.tool.arguments.path)

# A cheap first look at the arguments (and the cleaned path) as one
# lower-case text: most calls contain none of the targets' `contains` words
# and stop here, without visiting each argument. (JSON escapes only quotes,
# backslashes, control characters and <>&, which the `contains` words never
# hold: a data test checks that.)
argument_text := lower(concat("\n", [json.marshal(input.tool.arguments), clean_path]))

# Every argument string, at any depth, and the cleaned path.
argument_strings contains s if {
	walk(input.tool.arguments, [_, s])
	is_string(s)
}

argument_strings contains clean_path if clean_path != ""

# The argument strings that match a production target.
matches contains s if {
	some target in data.settings.production.targets
	contains(argument_text, target.contains)
	some s in argument_strings
	lowered := lower(s)
	contains(lowered, target.contains)
	regex.match(target.pattern, lowered)
}

default quorum := 1

# Destructive tools (the default, see tools.rego) need two approvals.
quorum := 2 if tools.destructive

base := object.union(
	{
		"action": "escalate",
		"message": sprintf("%s targets production (%s)", [input.tool.name, concat(", ", sort(matches))]),
		"approvers": data.settings.production.approvers,
		"quorum": quorum,
		"timeout": data.settings.production.timeout,
	},
	reaching,
)

# A target may carry its own `reminders` and `escalate_to` (docs/policies.md
# "Reminders and escalation tiers"): a call matching exactly one such target
# gets them, so that only the paths that need paging page a second tier.
# Two such targets matching one call would disagree: neither applies.
paging contains object.filter(target, ["reminders", "escalate_to"]) if {
	some target in data.settings.production.targets
	object.keys(object.filter(target, ["reminders", "escalate_to"])) != set()
	contains(argument_text, target.contains)
	some s in matches
	contains(lower(s), target.contains)
	regex.match(target.pattern, lower(s))
}

default reaching := {}

reaching := r if {
	count(paging) == 1
	some r in paging
}

escalate := object.union(base, {"grantable": grantable}) if {
	count(matches) > 0
	grantable
} else := base if count(matches) > 0

# Grants (docs/design.md "Grants") are offered for calls one approver decides —
# never for destructive tools, whose two approvers a grant would bypass —
# and only for calls with a path: a grant allows the proposer to call the
# same tool under the approved path's directory (/srv/prod/logs/a.log:
# anything under /srv/prod/logs/), for at most grant_max_ttl. "proposer"
# pins it to that proposer only where fulfiller runs with
# --gateway-authenticates-from; elsewhere anyone can claim a proposer's name,
# so fulfiller drops the pin and the grant is for anyone who may propose in
# the space (the approver's card says so).
grantable := {
	"max_ttl": data.settings.production.grant_max_ttl,
	"scope": ["proposer", "tool", "arguments.path:prefix"],
} if {
	quorum == 1
	is_string(input.tool.arguments.path)
}

# A live grant covering this call (fulfiller passes only those, as
# input.grants, oldest first) lets it through — checked again here, so a
# grant made under an older, wider policy never lets a destructive call
# through.
granted := {
	"action": "fulfill",
	"message": sprintf("%s targets production; allowed by %s's grant %s until %s", [input.tool.name, g.granted_by, g.id, g.expires]),
} if {
	count(matches) > 0
	grantable
	some g in input.grants
	grant_for_proposer(g)
	g.tool == input.tool.name
}

# A grant pinned to a proposer is for that proposer; one without a
# proposer (no pin: the gateway does not authenticate senders) for anyone.
grant_for_proposer(g) if g.proposer == input.proposer.id

grant_for_proposer(g) if not g.proposer

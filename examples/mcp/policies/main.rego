# METADATA
# title: A starter policy for a developer's machine
# description: |
#   For `fulfiller mcp` in front of the filesystem and git MCP servers
#   (docs/mcp.md). Reads and writes inside the working trees run; deletes,
#   pushes, a tool whose definition changed, and anything outside the
#   trees ask the person at the client (@caller); secrets are never
#   touched; a tool the policy does not know is refused. Precedence:
#   refuse beats ask beats run.
package fulfiller

import data.fulfiller.workspace as ws

default decision := {
	"action": "reject",
	"reason": "policy",
	"message": "no rule of the starter policy allows this call",
}

decision := refuse(msg) if {
	some msg in refusals
	msg == min(refusals) # one message, the same every time
} else := ask(msg) if {
	some msg in questions
	msg == min(questions)
} else := {"action": "fulfill", "message": sprintf("%s inside the working tree", [ws.kind])} if {
	input.method == "tools/call"
	ws.kind in {"read", "write"}
} else := {"action": "fulfill", "message": "read-only method"} if {
	# A MEW space also proposes discovery and reads (fulfiller mcp passes
	# them through without asking the policy).
	input.method in {"tools/list", "resources/list", "resources/templates/list", "resources/read", "prompts/list", "prompts/get"}
}

# --- refused: what no person should be asked to allow ------------------

refusals contains sprintf("%s is a secret (%s): fulfiller never lets an agent touch secrets. Work without it, or ask the user to give you only what you need", [p, why]) if {
	some [p, why] in ws.secrets
}

refusals contains sprintf("%s is a relative path, and fulfiller cannot tell where it points: call %s again with an absolute path inside %s", [p, ws.name, roots_text]) if {
	some p in ws.relative
}

refusals contains sprintf("fulfiller's starter policy does not know the tool %s of %s, so it cannot check what it would do. Ask the user to list it in data.yaml (developer.read_tools, write_tools or ask_tools)", [ws.name, server]) if {
	input.method == "tools/call"
	ws.kind == "unknown"
	ws.unknown_tools != "ask"
}

# --- asked: the person at the client decides --------------------------

questions contains sprintf("the definition of %s of %s changed since it was pinned (%s, now %s): approve only if you expected the change; `fulfiller mcp accept-tools %s` records it", [ws.name, server, object.get(input.tool, "pinned_digest", "?"), object.get(input.tool, "digest", "?"), server]) if {
	input.tool.changed == true
}

questions contains sprintf("%s is named for a %s, which is asked about wherever it points", [ws.name, ws.kind]) if {
	ws.kind in {"delete", "push"}
}

questions contains sprintf("%s is one of the tools asked about every time (ask_tools)", [ws.name]) if {
	ws.kind == "ask"
}

questions contains sprintf("%s writes where files run as code (%s): %s", [ws.name, concat(", ", ws.guarded_dirs), concat(", ", sort(ws.guarded))]) if {
	count(ws.guarded) > 0
}

questions contains sprintf("%s reaches outside the working tree (%s): %s", [ws.name, roots_text, concat(", ", ws.outside_shown)]) if {
	count(ws.outside) > 0
}

questions contains sprintf("the starter policy does not know %s of %s (unknown_tools: ask)", [ws.name, server]) if {
	input.method == "tools/call"
	ws.kind == "unknown"
	ws.unknown_tools == "ask"
}

# --- how ---------------------------------------------------------------

refuse(msg) := {"action": "reject", "reason": "policy", "message": msg}

# Through fulfiller mcp, the person at the client is asked (MCP
# elicitation). A MEW space has no caller: its approvers come from
# data.developer.mew_approvers, and without any the call is refused
# rather than left to someone who cannot be reached.
ask(msg) := {"action": "escalate", "approvers": ["@caller"], "message": msg} if {
	input.front_end == "mcp"
} else := {"action": "escalate", "approvers": ws.mew_approvers, "message": msg} if {
	count(ws.mew_approvers) > 0
} else := refuse(sprintf("%s; in a space nobody can be asked (set developer.mew_approvers in data.yaml)", [msg]))

server := object.get(input.tool, "server", "its server")

roots_text := concat(", ", ws.roots) if count(ws.roots) > 0

else := "no working tree is set: run fulfiller mcp init"

package fulfiller

# Two rules produce different decisions for a write: an eval_conflict_error.
decision := {"action": "fulfill"} if input.method == "tools/call"

decision := {"action": "escalate"} if input.tool.name == "write_file"

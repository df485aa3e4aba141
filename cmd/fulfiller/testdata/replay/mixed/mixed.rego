package fulfiller

decision := {"action": "fulfill", "message": "read-only"} if {
	input.params.name == "read_file"
} else := {"action": "reject", "reason": "unsafe", "message": "never delete"} if {
	input.params.name == "delete_file"
} else := {"action": "escalate"}

package fulfiller

# Two unsafe variables: every error is reported, each with its line.
decision := {"action": "fulfill", "message": msg} if {
	input.method == "tools/call"
}

risk := level if input.tool.name == "write_file"

package fulfiller

# A function that gives two answers for the same argument fails at runtime.
risk(name) := 1 if startswith(name, "write")

risk(name) := 2 if endswith(name, "file")

decision := {"action": "fulfill", "risk": risk(input.tool.name)}

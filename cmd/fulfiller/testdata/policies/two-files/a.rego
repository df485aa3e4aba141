package fulfiller

decision := {"action": "fulfill"} if {
	input.method ==
}

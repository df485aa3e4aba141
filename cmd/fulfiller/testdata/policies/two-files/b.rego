package fulfiller.helpers

allow if {
		input.x = = 1
}

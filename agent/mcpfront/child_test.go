package mcpfront

const childEnv = "MCPFRONT_TEST_CHILD"

func runChild() int { return 0 }

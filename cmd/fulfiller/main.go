// Command fulfiller is the trusted participant of a MEW space that decides
// untrusted agents' proposals with Rego policies. This package only parses
// flags and wires the other packages together.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitCode maps an error to the documented exit codes: 0 success, 1 runtime
// failure, 2 usage or configuration error. The message goes to stderr as one
// line so that scripts and operators can grep it.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.silent {
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "fulfiller: "+oneLine(err.Error()))
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

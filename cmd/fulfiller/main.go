// Command fulfiller is the trusted participant of a MEW space that decides
// untrusted agents' proposals with Rego policies. This package only parses
// flags and wires the other packages together.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	printError(os.Stderr, err)
	os.Exit(exitCode(err))
}

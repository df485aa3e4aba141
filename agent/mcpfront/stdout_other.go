//go:build !unix

package mcpfront

import (
	"io"
	"os"
)

// pollableStdout is os.Stdout where its writes take no deadline:
// frameWriter queues every frame to it.
func pollableStdout() (io.Writer, func() error) {
	return os.Stdout, func() error { return nil }
}

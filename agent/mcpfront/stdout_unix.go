//go:build unix

package mcpfront

import (
	"io"
	"os"
	"syscall"
)

// pollableStdout is the process's stdout as a stream whose writes take
// a deadline (frameWriter), and how to let it go.
//
// Go opens fds 0–2 in blocking mode, so os.Stdout takes no deadline
// (golang/go#24842). When stdout is a pipe or a socket (an MCP client
// that started fulfiller), a copy of the fd is put in non-blocking mode
// and made an os.File, which the runtime then polls (os.NewFile). The
// mode belongs to the open pipe, not the fd: while the copy is in use,
// a write through os.Stdout that the pipe cannot take at once fails
// (EAGAIN) rather than waiting, so nothing but the connection may write
// to stdout (nothing else does: it is the protocol's stream); the mode
// is set back when it is let go. A terminal or a regular file is not
// polled: os.Stdout is returned as it is, and frameWriter queues every
// frame to it.
func pollableStdout() (io.Writer, func() error) {
	none := func() error { return nil }
	fi, err := os.Stdout.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return os.Stdout, none
	}
	// As os does: no fork may inherit the copy before it is close-on-exec.
	syscall.ForkLock.RLock()
	fd, err := syscall.Dup(int(os.Stdout.Fd()))
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return os.Stdout, none
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return os.Stdout, none
	}
	f := os.NewFile(uintptr(fd), "/dev/stdout")
	return f, func() error {
		// Blocking again before the copy is closed: after it, there is no
		// fd left of ours to set the mode through. No write is pending
		// (lineConn.Close stopped the writer first).
		_ = syscall.SetNonblock(fd, false)
		return f.Close()
	}
}

package approver

import "golang.org/x/sys/unix"

// flushInput discards what was typed but not yet read on the terminal fd:
// half a reason typed for a card that went away must not answer the next.
func flushInput(fd int) { _ = unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }

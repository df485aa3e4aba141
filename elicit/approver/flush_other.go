//go:build !linux

package approver

// flushInput is a no-op where the terminal's input queue cannot be flushed
// portably; drain still discards what was already read.
func flushInput(int) {}

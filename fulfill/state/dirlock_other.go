//go:build !unix

package state

import "os"

// flock is not taken where there is no flock(2): the platforms fulfiller
// ships for are unix (docs/operations.md), and there the directory is
// locked.
func flock(*os.File) error { return nil }

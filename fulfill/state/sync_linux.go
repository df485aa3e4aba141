package state

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsSync returns a function that syncs the file system holding dir with
// syncfs(2): every file and directory entry JetStream wrote there,
// including new message blocks, in one call.
func fsSync(dir string) (func() error, func() error, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("state: open %s to sync it: %w", dir, err)
	}
	fd := int(f.Fd())
	return func() error { return unix.Syncfs(fd) }, f.Close, nil
}

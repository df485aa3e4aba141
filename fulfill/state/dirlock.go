package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrDirInUse is Open's error for a state directory another process
// holds: one directory, one embedded server, or the file store is
// corrupted (its server takes no lock of its own).
var ErrDirInUse = errors.New("state directory in use")

// lockFile is the file in a state directory whose lock says who holds it.
const lockFile = "fulfiller.lock"

// lockDir takes dir's lock for this process, or fails with ErrDirInUse
// naming the holder. The lock is the kernel's (flock), so it ends with
// the process however it ends: a kill -9 leaves nothing to clean up.
// release drops it.
func lockDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: lock %s: %w", path, err)
	}
	if err := flock(f); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, errLocked) {
			who := "another fulfiller"
			if pid, err := strconv.Atoi(strings.TrimSpace(string(holder))); err == nil && pid > 0 {
				who = fmt.Sprintf("another fulfiller (pid %d)", pid)
			}
			return nil, fmt.Errorf("%w: state directory %s is in use by %s; give each fulfiller its own --state, or share one NATS cluster (nats://…)", ErrDirInUse, dir, who)
		}
		return nil, fmt.Errorf("state: lock %s: %w", path, err)
	}
	// Who holds it, for the error another process gets; the lock, not
	// the pid, is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// errLocked is flock's "held by another".
var errLocked = errors.New("locked")

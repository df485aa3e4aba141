// Package atomicfile writes a file whole or not at all: the data goes
// to a hidden temporary file beside it, synced, then renamed (Write) or
// linked (Create) into place. A reader (a policy directory's watcher, a
// process reading the shared store's address) sees the old file or the
// new one, never part of one; and no temporary file is left behind when
// a step fails. Its errors are the os package's, which name the path
// and the step.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data, mode perm, in one rename. The temporary
// file is hidden (.NAME.*.tmp), so that directory loaders that skip
// hidden files (policies, examples' data) never read it half-written.
// path is replaced as a name: a symbolic link there is replaced by the
// file, not followed (callers that mean the link's target resolve it).
func Write(path string, data []byte, perm fs.FileMode) error {
	tmp, err := aside(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Create makes path with data, mode perm, unless it exists: written
// aside and hard-linked into place, so that of two processes creating
// it at once one wins and both then read the winner's. It reports
// whether this call made it; an existing path is no error.
func Create(path string, data []byte, perm fs.FileMode) (created bool, err error) {
	tmp, err := aside(path, data, perm)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp) // linked or not, the temporary name goes
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// aside writes data to a new hidden file in path's directory, mode
// perm, synced, and returns its name; on an error nothing is left.
func aside(path string, data []byte, perm fs.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		// CreateTemp made it 0600; Chmod is not masked by the umask,
		// as the mode of a file created is.
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync() // the data is on disk before the name points at it
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

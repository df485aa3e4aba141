//go:build !linux

package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// fsSync returns a function that fsyncs every file and directory under
// dir: where syncfs(2) is missing, the portable way to the same
// guarantee.
func fsSync(dir string) (func() error, func() error, error) {
	return func() error {
		return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed since it was listed (a compacted block)
			}
			if err != nil {
				return err
			}
			f, err := os.Open(path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Sync()
		})
	}, func() error { return nil }, nil
}

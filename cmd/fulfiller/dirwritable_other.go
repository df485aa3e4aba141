//go:build !unix

package main

import (
	"errors"
	"os"
)

// dirWritable reports whether dir is a directory; without access(2) its
// writability is found out when run creates the file.
func dirWritable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return nil
}

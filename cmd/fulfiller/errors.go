package main

import (
	"fmt"
	"strings"
)

// exitError carries the process exit code with the error that caused it.
type exitError struct {
	code   int
	err    error
	silent bool // already reported (e.g. a failing `fulfiller test` run)
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports a bad flag, argument, config key or policy file:
// exit code 2, and the message should name the offending thing.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// usageError wraps err as a usage error (exit 2).
func usageError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: 2, err: err}
}

// failedQuietly ends the command with code without printing anything more:
// the command has already told the user what went wrong.
func failedQuietly(code int, err error) error {
	return &exitError{code: code, err: err, silent: true}
}

// oneLine folds a multi-line message so every error is a single line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ; ")), " ")
}

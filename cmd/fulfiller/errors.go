package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mewkit/fulfiller/policies"
)

// exitCode maps an error to the documented exit codes: 0 success, 1 runtime
// failure, 2 usage or configuration error.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// printError writes err to w as "fulfiller: message", one line so that
// scripts and operators can grep it. Rego errors are the exception: the
// first line still names the file and the problem, and every error of the
// load follows as opa check prints it, with the offending line and a
// caret, because a policy author needs all of them and a one-line fold
// would mangle the caret lines. Errors already reported print nothing.
func printError(w io.Writer, err error) {
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.silent {
		return
	}
	msg := err.Error()
	var le *policies.LoadError
	if errors.As(err, &le) && len(le.Rego) > 0 {
		// Keep any context wrapped around the policy error.
		if prefix, ok := strings.CutSuffix(msg, le.Error()); ok {
			if prefix != "" {
				prefix = oneLine(prefix) + " "
			}
			fmt.Fprintln(w, "fulfiller: "+prefix+le.Pretty())
			return
		}
	}
	fmt.Fprintln(w, "fulfiller: "+oneLine(msg))
}

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

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

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

// wordedError is an error whose message is written for an operator, with
// the error it was made from kept as its cause.
type wordedError struct {
	msg   string
	cause error
}

func (e *wordedError) Error() string { return e.msg }
func (e *wordedError) Unwrap() error { return e.cause }

// fileError is a usage error about a file or directory a flag names
// (flag is "--token-file", "config c.yaml: key …" and the like): the path
// and the problem in words, as in "--token-file /run/t: no such file or
// directory". A *fs.PathError loses the name of the system call that
// failed (open, stat, mkdir), which says nothing to an operator; any
// other error keeps its message.
func fileError(flag string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return usageError(&wordedError{msg: fmt.Sprintf("%s %s: %v", flag, pe.Path, pe.Err), cause: err})
	}
	return usageError(&wordedError{msg: flag + " " + err.Error(), cause: err})
}

// loadFlagError names the flag of a --policy or --data path that a policy
// load could not use (missing, unreadable, not a policy): the loader's
// message names the file only. flags pairs each flag with its paths.
// Rego errors keep their own form (printError): they name the file and
// line, and the file is a policy's.
func loadFlagError(err error, flags ...flagPaths) error {
	var le *policies.LoadError
	if errors.As(err, &le) && len(le.Rego) == 0 {
		for _, f := range flags {
			if slices.Contains(f.paths, le.File) {
				return usageError(&wordedError{msg: f.flag + " " + err.Error(), cause: err})
			}
		}
	}
	return usageError(err)
}

// flagPaths is a flag and the paths it was given, for loadFlagError.
type flagPaths struct {
	flag  string
	paths []string
}

// flagValueError is a usage error for a value a flag refused, named by
// where it came from (where is "--max-pending", "FULFILLER_MAX_PENDING" or
// "config c.yaml: key max-pending"): pflag's own message repeats the flag
// and the value and quotes the parser (strconv.ParseInt: parsing "abc":
// invalid syntax).
func flagValueError(where string, f *pflag.Flag, value string, err error) error {
	return usageError(&wordedError{msg: fmt.Sprintf("%s %q: %s", where, value, valueProblem(f, err)), cause: err})
}

// valueProblem says in words why value is not one of f's.
func valueProblem(f *pflag.Flag, err error) string {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		err = iv.Unwrap()
	}
	var ne *strconv.NumError
	if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
		return "out of range"
	}
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "not a whole number"
	case "float32", "float64":
		return "not a number"
	case "duration":
		return "not a duration (a number with a unit: 300ms, 30s, 5m, 1h)"
	case "bool":
		return "want true or false"
	case "size":
		return "not a size (bytes, or a number with KiB, MiB or GiB)"
	}
	if ne != nil {
		return "not a number"
	}
	return err.Error()
}

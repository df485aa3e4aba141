package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/policies"
)

type fmtFlags struct {
	list, diff, write, fail bool
}

func newFmtCmd() *cobra.Command {
	var fl fmtFlags
	cmd := &cobra.Command{
		Use:   "fmt [-l|-d|-w] [--fail] PATH...",
		Short: "Format Rego policies as opa fmt does",
		Long: `fmt formats the .rego files under each PATH (test files included, hidden
files and directories skipped) with OPA's formatter, as opa fmt formats
Rego v1. Without a flag it prints the formatted text of every file on
stdout; with --fail alone it prints no text but names, on stderr, each
file whose formatting differs.

  -l  list the files whose formatting differs (as opa fmt -l)
  -d  print a unified diff of each such file against its formatted text
  -w  rewrite such files in place (atomically, keeping their permissions)

  --fail  exit 2 when any file's formatting differs (as opa fmt --fail)

-l and -d may be combined with -w (list or diff, then fix).

Exit codes are opa fmt's (v1.22): 0 when done, also when files need
formatting (unless --fail); 2 when --fail found a file to format or a file
does not parse (every parse error is printed with its line and a caret);
1 when a PATH cannot be read or a flag or argument is wrong.`,
		Example: `  fulfiller fmt -l --fail examples/policies    # in CI: exit 2 lists what to format
  fulfiller fmt -d examples/policies/main.rego
  fulfiller fmt -w examples/policies`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return opaUsageErrorf("name at least one policy file or directory to format")
			}
			return runFmt(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, fl)
		},
	}
	cmd.SetFlagErrorFunc(opaFlagError)
	f := cmd.Flags()
	f.BoolVarP(&fl.list, "list", "l", false, "list files whose formatting differs")
	f.BoolVarP(&fl.diff, "diff", "d", false, "print a unified diff of the formatting changes")
	f.BoolVarP(&fl.write, "write", "w", false, "rewrite files whose formatting differs")
	f.BoolVar(&fl.fail, "fail", false, "exit 2 when a file's formatting differs (as opa fmt --fail)")
	return cmd
}

func runFmt(stdout, stderr io.Writer, paths []string, fl fmtFlags) error {
	files, err := policies.FormatFiles(paths)
	if err != nil {
		// opa fmt: a path it cannot walk is exit 1.
		return &exitError{code: 1, err: err}
	}
	var broken, changed int
	for _, f := range files {
		if f.Err != nil {
			broken++
			printError(stderr, f.Err)
			continue
		}
		switch {
		case fl.fail && !fl.list && !fl.diff && !fl.write:
			// A check, as opa fmt --fail without -l or -d is: no text,
			// which run together would name no file, but each file that
			// needs formatting, by name, with opa's "unexpected diff".
			if f.Changed() {
				changed++
				fmt.Fprintf(stderr, "fulfiller: %s: unexpected diff: needs formatting (fmt -d shows how, fmt -w does it)\n", f.Path)
			}
			continue
		case !fl.list && !fl.diff && !fl.write:
			if f.Changed() {
				changed++ // for --fail
			}
			if _, err := stdout.Write(f.Formatted); err != nil {
				return err
			}
			continue
		case !f.Changed():
			continue
		}
		changed++
		if fl.list {
			fmt.Fprintln(stdout, f.Path)
		}
		if fl.diff {
			fmt.Fprint(stdout, policies.FormatDiff(f.Path, f.Old, f.Formatted))
		}
		if fl.write {
			if err := f.Write(); err != nil {
				return &exitError{code: 2, err: err} // opa fmt -w's code
			}
		}
	}
	// opa fmt's codes: 2 for a file it cannot format and, with --fail,
	// for one whose formatting differs; a difference alone is no failure.
	switch {
	case broken > 0:
		return failedQuietly(2, fmt.Errorf("%d files do not parse", broken))
	case changed > 0 && fl.fail:
		return failedQuietly(2, errors.New("files need formatting"))
	}
	return nil
}

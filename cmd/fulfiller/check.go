package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

func newCheckCmd() *cobra.Command {
	var strict bool
	var toolMetadata string
	cmd := &cobra.Command{
		Use:   "check [--strict] [--tool-metadata FILE] PATH...",
		Short: "Parse and compile policies and check their decisions against the contract",
		Long: `check parses and compiles every .rego file under each PATH (test files
included) as opa check does, and reports every error at once, each as
file:line:column: code: message with the source line and a caret under the
spot. --strict compiles in OPA's strict mode (opa check --strict: unused
variables, imports and arguments, deprecated built-ins and the like are
errors).

It also checks the decisions the policies write down against fulfiller's
policy contract (fulfiller_contract_error): a data.fulfiller.decision rule
whose object has no "action"; an "action" other than fulfill, reject or
escalate; a reject without a reason or with a reason that is not a reason
code; a "timeout" that is not a duration; a "quorum" larger than the
approvers listed; a malformed "grantable"; a key that is not part of the
contract (a warning, an error with --strict). It sees object literals — in
the head of a decision rule, bound to its value in the body, or any object
with a decision's "action" — and values written as constants; a value
computed at run time (data, sprintf, another rule) is checked by the
sidecar when it decides, and a malformed decision fails closed.

--tool-metadata FILE (like run's flag, also FULFILLER_TOOL_METADATA or the
config key tool-metadata) validates the tool-metadata file as run loads it:
unknown keys, hints that are not true or false, bad glob patterns.

Exit codes are opa check's (v1.22) where opa has the case: 0 when nothing
is wrong (warnings are printed on stderr), 1 when the policies have errors
(contract errors too, which opa check does not see), a PATH cannot be read
or a flag or argument is wrong; and 2 when the tool-metadata file, which
only fulfiller reads, is invalid (one line naming the file, line and key).`,
		Example: `  fulfiller check examples/policies
  fulfiller check --strict examples/policies   # in CI
  fulfiller check --tool-metadata examples/tool-metadata.yaml examples/policies`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheck(cmd.Context(), cmd.ErrOrStderr(), args, strict, toolMetadata)
		},
	}
	cmd.SetFlagErrorFunc(opaFlagError)
	cmd.Flags().BoolVar(&strict, "strict", false, "compile in OPA's strict mode and make contract warnings errors")
	cmd.Flags().StringVar(&toolMetadata, "tool-metadata", "", "also validate this tool-metadata `FILE` (as fulfiller run --tool-metadata)")
	return cmd
}

// runCheck checks the policies under paths and the tool-metadata file (if
// any). The need for something to check is tested here, not in Args:
// --tool-metadata may come from the environment or the config file,
// which are applied after cobra checks the arguments.
func runCheck(ctx context.Context, stderr io.Writer, paths []string, strict bool, toolMetadata string) error {
	if len(paths) == 0 && toolMetadata == "" {
		return opaUsageErrorf("name at least one policy file or directory to check (or --tool-metadata FILE)")
	}
	if toolMetadata != "" {
		meta, err := toolmeta.Load(toolMetadata)
		if err != nil {
			return usageErrorf("--tool-metadata %w", err)
		}
		if meta.Len() == 0 {
			fmt.Fprintf(stderr, "fulfiller: warning: --tool-metadata %s declares no tools\n", toolMetadata)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	report, err := policies.Check(ctx, paths, policies.CheckOptions{Strict: strict})
	if err != nil {
		// opa check: a path it cannot load is exit 1, as an error in it.
		return &exitError{code: 1, err: err}
	}
	for _, w := range report.Warnings {
		fmt.Fprintln(stderr, "fulfiller: warning: "+w)
	}
	if report.Problems != nil {
		return &exitError{code: 1, err: report.Problems}
	}
	return nil
}

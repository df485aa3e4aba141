package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fulfiller",
		Short: "Decide untrusted agents' MEW proposals with Rego policies",
		Long: `fulfiller is the trusted participant of a MEW Protocol space. Untrusted agents
may only propose MCP tool calls; fulfiller decides each proposal with Rego
policies: fulfil it, reject it with a reason, or ask a human.

Every flag can also be set as FULFILLER_<FLAG> in the environment (dashes become
underscores) or as a key in the YAML file named by --config. Flags win over the
environment, the environment over the file.`,
		Version: versionString(),
		// cobra's default, made explicit: SuggestionsFor reads it as is.
		SuggestionsMinimumDistance: 2,
		SilenceUsage:               true,
		SilenceErrors:              true,
		// The root runs only to say that its argument is no command:
		// cobra's own message spans lines and exits 1.
		Args: unknownCommand,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd)
		},
	}
	root.SetVersionTemplate("fulfiller {{.Version}}\n")
	root.PersistentFlags().String("config", "", "YAML file with flag values (keys are flag names)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		var iv *pflag.InvalidValueError
		if errors.As(err, &iv) {
			return flagValueError("--"+iv.GetFlag().Name, iv.GetFlag(), iv.GetValue(), err)
		}
		return usageError(err)
	})
	for _, sub := range subcommands() {
		root.AddCommand(sub)
	}
	usageArgs(root)
	return root
}

// subcommands lists every subcommand. Each lives in its own file.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		newRunCmd(),
		newDemoCmd(),
		newBenchCmd(),
		newEvalCmd(),
		newTestCmd(),
		newCheckCmd(),
		newFmtCmd(),
		newReplayCmd(),
		newGrantsCmd(),
		newSuggestCmd(),
		newApproveCmd(),
		newInboxCmd(),
		newMCPCmd(),
		newKeysCmd(),
		newVersionCmd(),
	}
}

// unknownCommand rejects an argument of the root, which can only be a
// mistyped command, as a usage error on one line with cobra's suggestion.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(`; did you mean "%s"?`, strings.Join(s, `" or "`))
	}
	return usageErrorf("%s (see fulfiller --help)", msg)
}

// usageArgs makes every command's argument check a usage error (exit 2),
// as the CLI contract says; cobra's own checks return plain errors.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			return usageError(check(cmd, args))
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

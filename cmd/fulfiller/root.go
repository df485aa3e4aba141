package main

import (
	"github.com/spf13/cobra"
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
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd)
		},
	}
	root.PersistentFlags().String("config", "", "YAML file with flag values (keys are flag names)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(err)
	})
	for _, sub := range subcommands() {
		root.AddCommand(sub)
	}
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
		newApproveCmd(),
		newKeysCmd(),
		newVersionCmd(),
	}
}

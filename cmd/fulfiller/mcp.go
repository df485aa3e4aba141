package main

import "github.com/spf13/cobra"

// newMCPCmd is `fulfiller mcp`: fulfiller's decisions in front of MCP
// servers (docs/mcp.md). Its subcommands that run the front end are in
// this file; the ones that manage its files (init, accept-tools) are
// mcpAdminCommands.
func newMCPCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Decide an MCP client's tool calls with Rego policies, in front of MCP servers",
		Args:  unknownCommand,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(mcpAdminCommands()...)
	return cmd
}

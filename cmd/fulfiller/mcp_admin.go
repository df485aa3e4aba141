package main

import "github.com/spf13/cobra"

// mcpAdminCommands are the `fulfiller mcp` subcommands that manage the
// front end's files rather than run it.
func mcpAdminCommands() []*cobra.Command {
	return nil
}

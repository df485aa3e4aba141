package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise
// the module version recorded by the Go toolchain is used.
var version = ""

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the fulfiller version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fulfiller %s\n", versionString())
			return err
		},
	}
}

// versionString is what `fulfiller version` and `fulfiller --version`
// print after the program name.
func versionString() string {
	return fmt.Sprintf("%s (%s, %s/%s, mew/v0.4)", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

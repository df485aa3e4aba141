package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/approver"
)

func newKeysCmd() *cobra.Command {
	keys := &cobra.Command{
		Use:   "keys",
		Short: "Make the signing keys of human approvers",
		Long: `Signed approvals (docs/protocol.md#signed-approvals): the gateway does not authenticate who sent
an envelope, so for approvers listed in the fulfiller's --approver-keys file
an answer counts only when signed with that approver's private key.`,
		Args: cobra.NoArgs,
	}
	var id, out string
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Make an approver's key pair",
		Long: `generate writes a new Ed25519 private key for the approver --id to --out
(default <id>.key; readable by you only, never overwritten) and prints the
public key line that goes into the fulfiller's --approver-keys file. Give the
private key to "fulfiller approve --key".`,
		Example: `  fulfiller keys generate --id alice >> approvers.keys
  fulfiller approve --gateway ws://localhost:8080 --id alice --key alice.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return usageErrorf("--id is required: the approver the key belongs to")
			}
			path := out
			if path == "" {
				path = id + ".key"
			}
			line, err := approver.WriteKeyFile(path, id, rand.Reader)
			switch {
			case errors.Is(err, fs.ErrExist):
				return usageErrorf("--out %s exists; keys are never overwritten (move it away first)", path)
			case err != nil:
				return usageErrorf("keys generate: %v", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote the private key of %s to %s (keep it secret); the line for the fulfiller's --approver-keys file:\n", id, path)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	gen.Flags().StringVar(&id, "id", "", "approver id the key belongs to (required)")
	gen.Flags().StringVar(&out, "out", "", "private key `FILE` to write (default <id>.key)")
	keys.AddCommand(gen)
	return keys
}

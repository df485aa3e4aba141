package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
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
	var prompt bool
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Make an approver's key pair",
		Long: `generate writes a new Ed25519 private key for the approver --id to --out
(default <id>.key; readable by you only, never overwritten) and prints the
public key line that goes into the fulfiller's --approver-keys file. Give the
private key to "fulfiller approve --key".

With --prompt, --id is a fulfiller's participant id and the key is the one it
signs its prompts with ("fulfiller run --prompt-key"); the line printed goes
into each approver's --fulfiller-keys file (docs/protocol.md#signed-prompts).`,
		Example: `  fulfiller keys generate --id alice >> approvers.keys
  fulfiller approve --gateway ws://localhost:8080 --id alice --key alice.key
  fulfiller keys generate --prompt --id fulfiller >> fulfillers.keys`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return usageErrorf("--id is required: the approver the key belongs to")
			}
			path := out
			if path == "" {
				path = id + ".key"
			}
			write, file := approver.WriteKeyFile, "the fulfiller's --approver-keys file"
			if prompt {
				write, file = approver.WritePromptKeyFile, "each approver's --fulfiller-keys file"
			}
			line, err := write(path, id, rand.Reader)
			switch {
			case errors.Is(err, fs.ErrExist):
				return usageErrorf("--out %s exists; keys are never overwritten (move it away first)", path)
			case err != nil:
				return usageErrorf("keys generate: %v", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote the private key of %s to %s (keep it secret); the line for %s:\n", id, path, file)
			_, err = fmt.Fprintln(cmd.OutOrStdout(), line)
			return err
		},
	}
	gen.Flags().StringVar(&id, "id", "", "approver id the key belongs to (required); with --prompt, the fulfiller's id")
	gen.Flags().BoolVar(&prompt, "prompt", false, "make a fulfiller's prompt key (for run --prompt-key) instead of an approver's key")
	gen.Flags().StringVar(&out, "out", "", "private key `FILE` to write (default <id>.key)")
	keys.AddCommand(gen)
	return keys
}

// loadPromptKey reads run's --prompt-key ("": none), as run and --check
// do.
func loadPromptKey(path string) (ed25519.PrivateKey, error) {
	if path == "" {
		return nil, nil
	}
	key, err := approver.LoadKey(path)
	if err != nil {
		return nil, usageErrorf("--prompt-key %v", err)
	}
	return key, nil
}

// logPromptKey says at start whether prompts are signed and, when they
// are, which line approvers pin, so that an operator can hand it out.
func logPromptKey(log *slog.Logger, id string, key ed25519.PrivateKey) {
	if key == nil {
		log.Warn("prompts are not signed (no --prompt-key): approvers' clients cannot tell the fulfiller's prompts from forged ones, since the gateway does not authenticate from")
		return
	}
	log.Info("prompts are signed; approvers pin this line with --fulfiller-keys", "line", approver.PublicLine(id, key))
}

// loadFulfillerKeys reads approve's --fulfiller-keys ("": none). Every
// fulfiller whose prompts are shown must have a key there: a prompt from
// one without would be dropped, and the person would wait for cards that
// never come.
func loadFulfillerKeys(path string, fulfillers []string) (approval.Keys, error) {
	if path == "" {
		return nil, nil
	}
	keys, err := approval.LoadKeys(path)
	if err != nil {
		return nil, usageErrorf("--fulfiller-keys %v", err)
	}
	for _, f := range fulfillers {
		if _, ok := keys[f]; !ok {
			return nil, usageErrorf("--fulfiller-keys %s: no key for fulfiller %s (add the line fulfiller keys generate --prompt printed)", path, f)
		}
	}
	return keys, nil
}

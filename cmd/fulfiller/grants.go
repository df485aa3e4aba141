package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/printable"
)

// grantsFlags are what both grants subcommands need to reach the API.
type grantsFlags struct {
	http, token, tokenFile string
}

func (g *grantsFlags) client(cmd *cobra.Command) (*ops.Client, error) {
	if g.http == "" {
		return nil, usageErrorf("--http is required: the address of the fulfiller's operator API (run's --http)")
	}
	log := newEvalLogger(cmd.ErrOrStderr())
	warnConfig(log, cmd, httpToken)
	token, err := httpToken.resolve(log, g.token, g.tokenFile)
	if err != nil {
		return nil, err
	}
	return &ops.Client{Base: g.http, Token: token}, nil
}

func newGrantsCmd() *cobra.Command {
	var fl grantsFlags
	cmd := &cobra.Command{
		Use:   "grants",
		Short: "List and revoke the grants approvers made",
		Long: `A grant is an approver's "allow calls like this for a while" (docs/design.md#grants-approvals-that-teach):
while it is live, the calls it covers may be fulfilled without asking anyone,
as far as the policy honours it. grants lists them and revokes them through a
running fulfiller's operator API (run's --http and its token); a revoked grant
stops matching at once, on every fulfiller of a group.

Exit 0 on success, 1 when the API cannot be reached or refuses (an unknown
grant, a wrong token), 2 for a bad flag.`,
		Example: `  FULFILLER_HTTP_TOKEN=… fulfiller grants list --http 127.0.0.1:9464
  fulfiller grants revoke grant-5f15e798090ce445 --http 127.0.0.1:9464 --http-token-file ops.token`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&fl.http, "http", "", "the fulfiller's operator API `ADDR` (run's --http, e.g. 127.0.0.1:9464)")
	pf.StringVar(&fl.token, "http-token", "", "the operator API's bearer token (prefer FULFILLER_HTTP_TOKEN or --http-token-file)")
	pf.StringVar(&fl.tokenFile, "http-token-file", "", "read the operator API's bearer token from `FILE`")

	var format string
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the grants not expired or revoked (--all: also those, kept for a day)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "pretty" && format != "json" {
				return usageErrorf("--format %q: want pretty or json", format)
			}
			c, err := fl.client(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			gs, err := c.Grants(ctx)
			if err != nil {
				return fmt.Errorf("grants list: %w", err)
			}
			shown := gs[:0:0]
			now := time.Now()
			for _, g := range gs {
				// A grant that only its proposer pin keeps from matching
				// is listed: it is still there to revoke.
				if all || g.Live || (!g.Revoked && now.Before(g.Expires)) {
					shown = append(shown, g)
				}
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(ops.GrantList{Grants: shown})
			}
			return writeGrants(cmd.OutOrStdout(), shown, time.Now())
		},
	}
	list.Flags().StringVar(&format, "format", "pretty", "output: pretty (a table) or json (GET /v1/grants's document)")
	list.Flags().BoolVar(&all, "all", false, "also list expired and revoked grants")

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a grant: the calls it covered are asked about again",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("name the one grant to revoke (fulfiller grants list shows their ids)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := fl.client(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			g, err := c.RevokeGrant(ctx, args[0])
			if err != nil {
				return fmt.Errorf("grants revoke %s: %w", printable.String(args[0]), err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked %s: %s\n", g.ID, printable.String(g.Terms()))
			return err
		},
	}
	cmd.AddCommand(list, revoke)
	return cmd
}

// writeGrants prints grants as a table. Proposer and argument values are
// others' text: escaped like every card. PROPOSER says who can use each
// grant: the one proposer it is pinned to, or anyone (docs/design.md
// "Proposer identity and grants"); a pinned grant that this fulfiller
// cannot rely on is "unusable", and a line under the table says why.
func writeGrants(w io.Writer, gs []ops.GrantView, now time.Time) error {
	if len(gs) == 0 {
		_, err := fmt.Fprintln(w, "no grants")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tPROPOSER\tALLOWS\tGRANTED BY\tEXPIRES")
	unusable := false
	for _, g := range gs {
		st := "live"
		switch {
		case g.Revoked:
			st = "revoked"
		case !now.Before(g.Expires):
			st = "expired"
		case !g.Live:
			st, unusable = "unusable", true
		}
		who := "anyone"
		if g.ProposerPinned {
			who = "pinned: " + printable.String(g.Proposer)
		}
		expires := g.Expires.UTC().Format(time.RFC3339)
		if st == "live" || st == "unusable" {
			expires += " (" + approver.Countdown(g.Expires, now) + " left)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable.String(g.ID), st, who, printable.String(g.Terms()), printable.String(g.GrantedBy), expires)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unusable {
		_, err := fmt.Fprintln(w, "unusable: pinned to a proposer, and the fulfiller does not run with --gateway-authenticates-from, so anyone could claim that name; it matches nothing (revoke it)")
		return err
	}
	return nil
}

package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/elicit/inbox"
	"github.com/mewkit/fulfiller/internal/demo"
	"github.com/mewkit/fulfiller/internal/mcpserve"
	"github.com/mewkit/fulfiller/internal/sidecar"
)

func newDemoCmd() *cobra.Command {
	var color, logLevel string
	var step time.Duration
	var interactive, hold, mcpStory bool
	var of opsFlags
	var web webFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole story on this machine, with no setup",
		Long: `demo starts an in-process MEW space, three sample tool servers (calculator,
a small file system fs, and jobs, which runs its long jobs as MCP tasks),
scripted proposers and the fulfiller with the example policies, and prints
each proposal's journey to its outcome. It exits 0 when every proposal
ended as the policies say it should.

Escalations go to simulated approvers: oncall-alice and oncall-bob on call,
and oncall-lead, asked about payments when nobody on call answers. With
--interactive you are oncall-alice: the approval cards of "fulfiller
approve" appear here, and every request to oncall-alice waits for your
answer (six or seven cards, depending on what you answer); whatever you
answer, the story goes on. With --web you answer in your browser instead,
in the inbox of "fulfiller approve --web", served on ` + defaultWebAddr + `
(--web=ADDR for another address); its address is printed.

With --mcp it tells the story of "fulfiller mcp" instead, with no MEW space:
a go-sdk client plays a coding agent in front of a filesystem server over a
temporary working tree, with fulfiller mcp and its starter policy (the one
"fulfiller mcp init" writes) between them. tools/list passes through; a read
and a write inside the tree run; reading .env is refused with the message
the model reads; two deletes ask you (@caller) through elicitation, and the
client answers as you would (approve one, decline the other); a tool whose
definition changes under you (a rug pull) is flagged and asks; then the
decision log's lines. With --mcp --interactive you answer the cards.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && cmd.Flags().Changed("web") && strings.Contains(args[0], ":") {
				return usageErrorf("demo --web %s: write --web=%s (a bare --web serves on %s)", args[0], args[0], defaultWebAddr)
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := web.validate(); err != nil {
				return err
			}
			if mcpStory {
				for _, name := range []string{"web", "hold", "http", "http-token", "http-token-file", "mask", "decision-log-sync"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("demo --mcp has no --%s: fulfiller mcp's story has no space or operator API", name)
					}
				}
				if of.decisionLog == "-" {
					return usageErrorf("demo --mcp --decision-log -: the story reads its log back; give a file")
				}
				return runMCPDemo(cmd, color, logLevel, step, interactive, of.decisionLog)
			}
			if web.addr != "" && interactive {
				return usageErrorf("--web and --interactive: choose the browser or this terminal")
			}
			useColor, err := colorMode(color, os.Stdout)
			if err != nil {
				return err
			}
			log, err := newLogger(os.Stderr, "text", logLevel)
			if err != nil {
				return err
			}
			// The operator API is closed without a token; a newcomer
			// trying it gets one made for this run, and the curl line.
			made := of.http != "" && of.httpToken == "" && of.httpTokenFile == ""
			if made {
				of.httpToken = rand.Text()
			}
			opsCfg, err := of.config(log)
			if err != nil {
				return err
			}
			// The fulfiller is run's sidecar (internal/sidecar), with its
			// decision log and listener, and a memory store as run --state
			// memory.
			opts := demo.Options{Out: cmd.OutOrStdout(), Color: useColor, Logger: log, Step: step, Hold: hold, Ops: opsCfg}
			if made {
				out := cmd.OutOrStdout()
				opts.Started = func(r demo.Running) {
					fmt.Fprintf(out, "Operator API token for this demo: %s\n  curl -H 'Authorization: Bearer %s' http://%s/v1/proposals\n\n", of.httpToken, of.httpToken, r.Sidecar.OpsAddr())
				}
			}
			ctx := cmd.Context()
			if web.addr != "" {
				in, err := inbox.New(inbox.Options{Approver: "oncall-alice", Fulfillers: []string{"fulfiller"}, Logger: log})
				if err != nil {
					return err
				}
				var url string
				var stop func() error
				ctx, url, stop, err = serveWeb(ctx, &web, in)
				if err != nil {
					return err
				}
				defer func() { _ = stop() }()
				opts.Approver, opts.ApproverCards, opts.ApproverURL = in, webCards, url
				if !cmd.Flags().Changed("step-timeout") {
					opts.Step = 5 * time.Minute // past the example policy's approval deadline (4m)
				}
			}
			if interactive {
				var ui *approver.Terminal
				if in, ok := cmd.InOrStdin().(*os.File); ok {
					ui = approver.NewTerminal(in, cmd.OutOrStdout(), useColor)
				} else {
					ui = &approver.Terminal{In: cmd.InOrStdin(), Out: cmd.OutOrStdout(), Color: useColor}
				}
				// The narration shares the terminal with the cards: it goes
				// through the card UI, which keeps the prompt line intact.
				opts.Approver, opts.Out = ui, ui
				if !cmd.Flags().Changed("step-timeout") {
					opts.Step = 5 * time.Minute // past the example policy's approval deadline (4m)
				}
			}
			err = demo.Run(ctx, opts)
			if errors.Is(err, demo.ErrStopped) {
				// q or ctrl-C at the card, or an interrupt: what the person
				// asked for, so not a failure.
				fmt.Fprintln(cmd.ErrOrStderr(), "fulfiller: demo stopped")
				return nil
			}
			var se *sidecar.StartError
			if errors.As(err, &se) {
				switch se.Part {
				case sidecar.PartDecisionLog:
					return decisionLogError(se.Err)
				case sidecar.PartHTTP:
					return listenError(of.http, se.Err)
				}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&color, "color", "auto", "colour the narration: auto (when stdout is a terminal), always or never")
	cmd.Flags().StringVar(&logLevel, "log-level", "error", "log level of the components: debug, info, warn or error")
	cmd.Flags().DurationVar(&step, "step-timeout", 10*time.Second, "how long to wait for each proposal's outcome (with --interactive: 5m, past the example approval deadline)")
	cmd.Flags().BoolVar(&interactive, "interactive", false, "be oncall-alice yourself: answer the approval cards at this terminal")
	cmd.Flags().BoolVar(&mcpStory, "mcp", false, "tell the story of fulfiller mcp instead: a coding agent's MCP client, fulfiller mcp with the starter policy, a filesystem server")
	cmd.Flags().BoolVar(&hold, "hold", false, "keep the space and the fulfiller up after the story until interrupted (to curl --http; without --http-token-file a token is made and printed)")
	of.register(cmd.Flags())
	web.register(cmd.Flags(), "be oncall-alice in your browser: serve the approval inbox (a bare --web on "+defaultWebAddr+", else --web=`ADDR`)", true)
	return cmd
}

// runMCPDemo is demo --mcp: the story of fulfiller mcp (demo.RunMCP).
func runMCPDemo(cmd *cobra.Command, color, logLevel string, step time.Duration, interactive bool, decisionLog string) error {
	useColor, err := colorMode(color, os.Stdout)
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, "text", logLevel)
	if err != nil {
		return err
	}
	opts := demo.MCPOptions{Out: cmd.OutOrStdout(), Color: useColor, Logger: log, Step: step, DecisionLog: decisionLog, Version: buildVersion()}
	if interactive {
		var ui *approver.Terminal
		if in, ok := cmd.InOrStdin().(*os.File); ok {
			ui = approver.NewTerminal(in, cmd.OutOrStdout(), useColor)
		} else {
			ui = &approver.Terminal{In: cmd.InOrStdin(), Out: cmd.OutOrStdout(), Color: useColor}
		}
		// The narration goes through the card UI, which keeps the
		// prompt line intact, as demo --interactive's.
		opts.Approver, opts.Out = ui, ui
		if !cmd.Flags().Changed("step-timeout") {
			opts.Step = 5 * time.Minute // fulfiller mcp's --approval-timeout
		}
	}
	err = demo.RunMCP(cmd.Context(), opts)
	if errors.Is(err, demo.ErrStopped) {
		fmt.Fprintln(cmd.ErrOrStderr(), "fulfiller: demo stopped")
		return nil
	}
	if se, ok := errors.AsType[*mcpserve.StartError](err); ok && se.Part == "decision log" {
		return decisionLogError(se.Err)
	}
	return err
}

// colorMode resolves --color; auto honours NO_COLOR and colours only a
// terminal.
func colorMode(mode string, out *os.File) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto":
		if os.Getenv("NO_COLOR") != "" {
			return false, nil
		}
		fi, err := out.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0, nil
	}
	return false, usageErrorf("--color %q: want auto, always or never", mode)
}

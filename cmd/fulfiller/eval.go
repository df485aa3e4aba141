package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/policies"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

type evalFlags struct {
	policies, data []string
	input          string
	explain        string
	printInput     bool
	tools          string
	policyTimeout  time.Duration
	bundle         bundleFlags
	toolMetadata   string
	toolServer     string
}

func newEvalCmd() *cobra.Command {
	var fl evalFlags
	cmd := &cobra.Command{
		Use:   "eval --policy PATH [--data PATH] --input FILE|- [--tools FILE] [--explain[=MODE]] [--print-input]",
		Short: "Decide one proposal offline and print the decision as JSON",
		Long: `eval decides one proposal with the policies, as the sidecar would, and prints
the decision as one JSON object on stdout.

--input (a file, or - for stdin) holds a bare mcp/proposal envelope — eval
builds the policy input around it as run would: front_end "mew", proposal,
method, params, proposer.id, tool.name and tool.arguments for tools/call,
and now — or an MCP client's tools/call request (JSON-RPC), built as
fulfiller mcp would: front_end "mcp", the request as proposal, method,
params, tool.name, tool.arguments and now — or a full policy input document
(an object with a "proposal" key), which is evaluated as it is.

--tool-metadata FILE lays the annotations the operator declares there over
the tool's, as run --tool-metadata does, so that input.tool.annotations is
what the sidecar would give the policy for a tool whose owner sends none (a
tool behind mew bridge). The file's entries are per tool owner, which a
bare envelope does not name: --tool-server ID says which participant owns
the tool (the one run would route the call to); it also sets
input.tool.server. Without it no entry applies.

--tools FILE fills input.tool from the tool owner's tools/list answer, as
run does from the answer it got: description, owner_annotations,
execution, and the annotations (the owner's, with --tool-metadata's laid
over them). FILE holds what the tool server answers — the MCP result
({"tools": [...]}), its JSON-RPC response, or the mcp/response envelope
(whose from names the owner; otherwise give --tool-server). These flags
complete a bare envelope only: a full input document is evaluated as it is.

--print-input prints the input document eval built instead of deciding,
exactly as the policy would see it, so that
  opa eval -I -d POLICY_DIR data.fulfiller.decision < input.json
gives the same decision.

A policy that fails (no decision, a malformed or conflicting one, an error, the
timeout) gives the fail-closed decision, reject with reason "policy", with the
cause in "error"; that is still a decision and eval exits 0. Without
--policy the built-in deny-all policy decides.

--explain adds "explanation": the rules that fired ("rules") and, for
each branch of data.fulfiller.decision that was tried and did not decide
(a rule, or one of its else branches), the expression of its body that
failed ("unmatched"). --explain=fails, =notes or =full also print OPA's
trace on stderr, filtered as opa eval --explain=MODE filters it.

Exit 0 when a decision was made, 2 when a policy, data or input file cannot be
used (the message names the file, and the line for Rego errors).`,
		Example: `  fulfiller eval --policy examples/policies --data examples/policies/data.yaml \
      --input examples/proposals/write-prod.json --explain`,
		Args: noPositionalArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEval(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), fl)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&fl.policies, "policy", nil, "Rego policy file or directory (repeatable)")
	f.StringArrayVar(&fl.data, "data", nil, "JSON or YAML data document for the policies (repeatable)")
	f.StringVar(&fl.input, "input", "", "proposal envelope or input document: a file, or - for stdin (required)")
	f.StringVar(&fl.explain, "explain", "", "also explain the decision: `MODE` rules (the default: rules that fired, branches that did not), or fails, notes, full (and OPA's trace on stderr)")
	f.Lookup("explain").NoOptDefVal = "rules"
	f.BoolVar(&fl.printInput, "print-input", false, "print the input document the policy would see, instead of deciding (for opa eval -I)")
	f.StringVar(&fl.tools, "tools", "", "the tool owner's tools/list answer `FILE` (result, JSON-RPC response or mcp/response envelope) that fills input.tool, as run does")
	fl.bundle.registerVerification(f)
	f.DurationVar(&fl.policyTimeout, "policy-timeout", policies.DefaultTimeout, "longest the evaluation may take (then: reject policy)")
	f.StringVar(&fl.toolMetadata, "tool-metadata", "", "tool-metadata `FILE` whose annotations replace a declared tool's, as run --tool-metadata does")
	f.StringVar(&fl.toolServer, "tool-server", "", "participant `ID` that owns the called tool (input.tool.server; picks the --tool-metadata entries)")
	return cmd
}

func runEval(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, fl evalFlags) error {
	if fl.input == "" {
		return usageErrorf("--input is required: a proposal envelope or input document file, or - for stdin")
	}
	if fl.policyTimeout <= 0 {
		return usageErrorf("--policy-timeout %s: must be positive", fl.policyTimeout)
	}
	switch fl.explain {
	case "true": // --explain=true, from when it was a boolean flag
		fl.explain = "rules"
	case "false":
		fl.explain = ""
	}
	switch fl.explain {
	case "", "rules", "fails", "notes", "full":
	default:
		return usageErrorf("--explain %q: want rules, fails, notes or full", fl.explain)
	}
	raw, name, err := readEvalInput(fl.input, stdin)
	if err != nil {
		return err
	}
	var meta *toolmeta.Metadata
	if fl.toolMetadata != "" {
		if meta, err = toolmeta.Load(fl.toolMetadata); err != nil {
			return usageErrorf("--tool-metadata %w", err)
		}
	}
	server := fl.toolServer
	var list *policies.ToolsList
	if fl.tools != "" {
		b, err := os.ReadFile(fl.tools)
		if err != nil {
			return usageErrorf("--tools %w", err)
		}
		if list, err = policies.ParseToolsList(b); err != nil {
			return usageErrorf("--tools %s: %w", fl.tools, err)
		}
		switch {
		case list.From != "" && server != "" && list.From != server:
			return usageErrorf("--tools %s is %s's answer, but --tool-server says the tool's owner is %s", fl.tools, list.From, server)
		case list.From == "" && server == "":
			return usageErrorf("--tools %s does not say who answered it (not an mcp/response envelope): give --tool-server ID, the tool's owner", fl.tools)
		case server == "":
			server = list.From // the owner, as run knows it from whom it asked
		}
	}
	unowned, unlisted := false, ""
	doc, envelope, err := policies.ParseEvalInputWith(raw, time.Now(), func(in *policies.Input) error {
		if in.Tool == nil {
			return nil // not a tools/call: nothing to describe
		}
		in.Tool.Server = server
		if list != nil {
			// As run's catalog: what the owner listed for this tool.
			if t, ok := list.Tool(in.Tool.Name); ok {
				in.Tool.Description = t.Description
				in.Tool.OwnerAnnotations = t.Annotations
				in.Tool.Execution = t.Execution
			} else {
				unlisted = in.Tool.Name
			}
		}
		in.Tool.Annotations, _ = meta.Annotate(server, in.Tool.Name, in.Tool.OwnerAnnotations)
		unowned = meta != nil && server == ""
		return nil
	})
	if err != nil {
		return usageErrorf("--input %s: %v", name, err)
	}
	if !envelope && (fl.toolMetadata != "" || fl.toolServer != "" || fl.tools != "") {
		flags := "--tool-metadata and --tool-server"
		if fl.tools != "" {
			flags = "--tools, --tool-metadata and --tool-server"
		}
		return usageErrorf("%s complete a bare proposal envelope; --input %s is a full input document, evaluated as it is", flags, name)
	}
	if unowned {
		fmt.Fprintln(stderr, "fulfiller: warning: --tool-metadata: no --tool-server names the tool's owner, so no entry applies (give the participant run would route the call to)")
	}
	if unlisted != "" {
		fmt.Fprintf(stderr, "fulfiller: warning: --tools %s does not list %s, so the policy sees no description or annotations from its owner\n", fl.tools, unlisted)
	}
	if fl.printInput {
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return fmt.Errorf("print input: %w", err)
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	opts := policies.Options{
		Policies: fl.policies,
		Data:     fl.data,
		Timeout:  fl.policyTimeout,
		Logger:   newEvalLogger(stderr),
	}
	if err := fl.bundle.local(&opts); err != nil {
		return err
	}
	engine, err := policies.Load(ctx, opts)
	if err != nil {
		return loadFlagError(err, flagPaths{"--policy", fl.policies}, flagPaths{"--data", fl.data})
	}
	if missing := engine.MissingData(); len(missing) > 0 {
		// As run --check says it: without the data, such a read is
		// undefined and the decision printed is not the one run makes
		// with its --data (a blocklist's reject can become a fulfil).
		opts.Logger.Warn(fmt.Sprintf("the policies read %s, which no --data provides: such a read is undefined, so the rules that need it never match", strings.Join(missing, ", ")))
	}

	var out any
	var d decision.Decision
	if fl.explain != "" {
		var x policies.Explanation
		d, x = engine.ExplainDocument(ctx, doc)
		out = policies.ExplainedDecision{Decision: d, Explanation: x}
		if trace, ok := x.FilteredTrace(fl.explain); ok {
			// On stderr: stdout stays one JSON object.
			fmt.Fprint(stderr, trace)
		}
	} else {
		d = engine.DecideDocument(ctx, doc)
		out = d
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("print decision: %w", err)
	}
	if _, err := stdout.Write(append(b, '\n')); err != nil {
		return err
	}
	if d.Err != nil {
		// Still a decision (exit 0), but a human running eval wants to
		// know the policy did not make it itself. OPA's message is kept
		// as OPA prints it: a conflict lists each value and where it came
		// from on its own indented line.
		fmt.Fprintf(stderr, "fulfiller: the policy failed, so this is the fail-closed reject: %s\n", strings.TrimSpace(d.Err.Error()))
	}
	return nil
}

// readEvalInput reads --input: a file, or stdin for "-".
func readEvalInput(path string, stdin io.Reader) ([]byte, string, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, "", usageErrorf("--input -: read stdin: %v", err)
		}
		return b, "(stdin)", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "", usageErrorf("--input %s: %v", path, err)
	}
	return b, path, nil
}

// newEvalLogger keeps eval's stderr quiet except for warnings, such as a
// built-in error during evaluation.
func newEvalLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// noPositionalArgs rejects positional arguments as a usage error (exit 2), naming
// the first one.
func noPositionalArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q", args[0])
	}
	return nil
}

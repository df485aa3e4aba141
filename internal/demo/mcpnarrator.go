package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/agent/mcpfront"
	"github.com/mewkit/fulfiller/elicit/approver"
	"github.com/mewkit/fulfiller/internal/printable"
)

// mcpNarrator tells demo --mcp's story: each step as the agent's client
// sees it (the call, the answer the model reads), with what fulfiller
// decided and why from its decision log, and the cards the person is
// shown. fulfiller mcp writes a decision's line, and the line of an
// answer it gives, before that answer goes out, so a step reads them as
// soon as its call returns (or its card arrives).
type mcpNarrator struct {
	*narrator
	log *logTail

	mu sync.Mutex
	// lines are the decision log's lines read so far, by proposal;
	// shown how many of each are printed; steps the proposals of the
	// steps played (all others are the current step's).
	lines map[string][]logLine
	shown map[string]int
	steps map[string]bool
	// stepOf is the step number of each proposal, for the log's lines.
	stepOf map[string]int
	// current is the proposal of the step being played ("" until known).
	current string

	// version is the MCP revision the agent's client and fulfiller
	// speak; retries, from 2026-07-28 on, that fulfiller asks the person
	// with an input_required result the client answers by calling again
	// (SEP-2322), not with elicitation/create while the call is held.
	version string
	retries bool
}

func newMCPNarrator(out io.Writer, color bool, logPath string) *mcpNarrator {
	return &mcpNarrator{narrator: newNarrator(out, color), log: &logTail{path: logPath},
		lines: map[string][]logLine{}, shown: map[string]int{}, steps: map[string]bool{}, stepOf: map[string]int{}}
}

// logLine is what the narration reads of a decision log line
// (fulfill/decisionlog/logrecord.Record).
type logLine struct {
	Type       string   `json:"type"`
	Stage      string   `json:"stage"`
	ProposalID string   `json:"proposal_id"`
	Tool       string   `json:"tool"`
	Target     string   `json:"target"`
	Reason     string   `json:"reason"`
	Message    string   `json:"message"`
	Status     string   `json:"status"`
	By         []string `json:"by"`
	Approver   string   `json:"approver"`
	Action     string   `json:"action"`
	Approve    *bool    `json:"approve"`
	LatencyNS  int64    `json:"latency_ns"`
	Result     *struct {
		Action    string   `json:"action"`
		Reason    string   `json:"reason"`
		Message   string   `json:"message"`
		Approvers []string `json:"approvers"`
		Quorum    int      `json:"quorum"`
	} `json:"result"`
	Input *struct {
		Tool struct {
			Changed      bool   `json:"changed"`
			Digest       string `json:"digest"`
			PinnedDigest string `json:"pinned_digest"`
		} `json:"tool"`
	} `json:"input"`
}

// logTail reads the lines appended to a decision log since the last read.
type logTail struct {
	path string
	// start is where this run's lines begin: a --decision-log file that
	// exists is appended to.
	start, offset int64
	partial       []byte
}

// skipExisting makes the tail begin at the log's end now.
func (t *logTail) skipExisting() {
	if fi, err := os.Stat(t.path); err == nil {
		t.start, t.offset = fi.Size(), fi.Size()
	}
}

// next returns the complete lines written since the last call.
func (t *logTail) next() ([]logLine, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.offset += int64(len(b))
	b = append(t.partial, b...)
	end := bytes.LastIndexByte(b, '\n') + 1
	t.partial = append([]byte(nil), b[end:]...)
	return parseLines(b[:end])
}

// all returns every line this run wrote.
func (t *logTail) all() ([]logLine, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.start, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return parseLines(b)
}

func parseLines(b []byte) ([]logLine, error) {
	var out []logLine
	for _, raw := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var l logLine
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("decision log line %.80q: %w", raw, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// mcpResult is how one step ended.
type mcpResult struct {
	n    int
	step mcpStep
	got  string
	ok   bool
}

func (n *mcpNarrator) header(tree, version string, interactive bool) {
	n.version, n.retries = version, version >= "2026-07-28"
	fmt.Fprintln(n.out, n.paint(ansiBold, "fulfiller demo --mcp")+n.paint(ansiDim, " — fulfiller mcp between a coding agent and an MCP server, in process"))
	fmt.Fprintln(n.out, "policy   examples/mcp/policies, the starter policy fulfiller mcp init writes")
	fmt.Fprintln(n.out, "tree     "+tree+n.paint(ansiDim, " (workspace_roots): README.md, main.go, src/, build/old.log and .env"))
	fmt.Fprintln(n.out, "server   fs, a filesystem server over the tree (Go, go-sdk): fulfiller mcp's upstream, on an in-memory transport where fulfiller mcp -- COMMAND has stdio")
	fmt.Fprintln(n.out, "agent    a go-sdk client plays the coding agent (client id local, MCP "+version+"); it declares elicitation, so fulfiller can ask you")
	if interactive {
		fmt.Fprintln(n.out, "humans   you are the person at the client (@caller): answer the cards below")
	} else {
		fmt.Fprintln(n.out, "humans   you are the person at the client (@caller): the agent's client answers the cards as you would (try --interactive)")
	}
	fmt.Fprintln(n.out)
}

func (n *mcpNarrator) branch(label, text string) {
	fmt.Fprintf(n.out, "   %s %s %s\n", n.paint(ansiDim, "├─"), pad(label), text)
}

// play makes step s's call on cs and tells how it went.
func (n *mcpNarrator) play(ctx context.Context, num int, s mcpStep, cs *mcp.ClientSession, wait time.Duration) mcpResult {
	r := mcpResult{n: num, step: s}
	n.mu.Lock()
	n.current = ""
	n.mu.Unlock()
	fmt.Fprintf(n.out, "%s %s\n", n.paint(ansiBold, fmt.Sprintf("%2d", num)), s.title)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.tool == "" || s.rugPull {
		fmt.Fprintf(n.out, "   %s\n", n.paint(ansiDim, "local → fs: tools/list"))
		list, err := cs.ListTools(ctx, nil)
		if err != nil {
			r.got = "tools/list failed: " + err.Error()
			n.end(r)
			return r
		}
		var names []string
		for _, t := range list.Tools {
			names = append(names, t.Name)
			d, _ := mcpfront.Digest(t)
			if s.rugPull && t.Name == s.tool {
				n.branch("listed", n.paint(ansiYellow, t.Name+" is now "+short(d)+"…: "+printable.String(t.Description)))
			}
		}
		if s.tool == "" {
			n.branch("listed", strings.Join(names, ", ")+n.paint(ansiDim, " (as fs lists them: tools/list is not decided)"))
			n.branch("pinned", "each definition's digest (name, description, schema, annotations), in --state: a change is flagged to the policy")
			r.got, r.ok = "listed", len(list.Tools) == 4
			n.end(r)
			return r
		}
	}
	args, _ := json.Marshal(s.args)
	fmt.Fprintf(n.out, "   %s tools/call %s %s\n", n.paint(ansiDim, "local → fs:"), s.tool, args)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: s.tool, Arguments: s.args})
	n.catchUp()
	n.mu.Lock()
	n.stepOf[n.current] = num
	n.mu.Unlock()
	action := n.decided()
	answer := ""
	switch {
	case err != nil:
		r.got = "no answer (" + err.Error() + ")"
	case res.IsError:
		reason, _ := res.Meta["fulfiller/reason"].(string)
		r.got = "rejected:" + reason
		if reason == "" {
			r.got = "tool failed"
		}
		answer = n.paint(ansiRed, "isError: "+toolText(res))
	default:
		r.got = "fulfilled"
		answer = n.paint(ansiGreen, toolText(res))
	}
	switch {
	case s.want == wantHuman:
		r.ok = err == nil && action == s.action
	default:
		r.ok = r.got == s.want && action == s.action
	}
	if answer != "" {
		fmt.Fprintf(n.out, "   %s %s %s\n", n.paint(ansiDim, "└─"), pad("the model"), answer)
	}
	n.end(r)
	return r
}

// end closes a step with its mark.
func (n *mcpNarrator) end(r mcpResult) {
	if r.ok {
		fmt.Fprintf(n.out, "   %s\n\n", n.paint(ansiGreen, "✓ "+r.got))
		return
	}
	fmt.Fprintf(n.out, "   %s\n\n", n.paint(ansiRed, "✗ want "+r.step.want+", got "+r.got))
}

// toolText is a tool result's text, one line.
func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, strings.TrimSpace(tc.Text))
		}
	}
	// A server's text: kept from steering the terminal, as the card's.
	return printable.String(strings.ReplaceAll(strings.Join(parts, " "), "\n", " ⏎ "))
}

// asked is told that fulfiller asks the person about proposal id: the
// lines so far (the decision, escalated) are printed before the card.
func (n *mcpNarrator) asked(id string) {
	n.mu.Lock()
	if id != "" {
		n.current = id
	}
	n.mu.Unlock()
	n.catchUp()
	how := " (elicitation/create on the agent's own session, the call held meanwhile: its client shows you a form)"
	if n.retries {
		how = " (an input_required result, MCP " + n.version + ": the agent's client shows you a form, then calls again with your answer)"
	}
	n.branch("prompted", "@caller"+n.paint(ansiDim, how))
}

// card shows the form the person sees, as fulfiller approve draws it.
func (n *mcpNarrator) card(c *approver.Card) {
	var b strings.Builder
	c.Render(&b, time.Now(), n.color)
	for _, line := range strings.Split(strings.Trim(b.String(), "\n"), "\n") {
		fmt.Fprintf(n.out, "   %s %s\n", n.paint(ansiDim, "│"), line)
	}
	fmt.Fprintf(n.out, "   %s\n", n.paint(ansiDim, "│"))
}

// answered tells what the person answered.
func (n *mcpNarrator) answered(a approver.Answer) {
	text := n.paint(ansiRed, "@caller "+a.Describe())
	if a.Approves() {
		text = n.paint(ansiGreen, "@caller approves")
		if a.Reason != "" {
			text += n.paint(ansiDim, ": "+a.Reason)
		}
	}
	n.branch("answered", text)
}

// catchUp reads the decision log's new lines and prints those of the
// current step's proposal not printed yet.
func (n *mcpNarrator) catchUp() {
	lines, err := n.log.next()
	if err != nil {
		n.branch("log", n.paint(ansiRed, "the decision log cannot be read: "+err.Error()))
		return
	}
	n.mu.Lock()
	for _, l := range lines {
		if n.current == "" && l.Type == "decision" && !n.steps[l.ProposalID] {
			n.current = l.ProposalID
		}
		n.lines[l.ProposalID] = append(n.lines[l.ProposalID], l)
	}
	id := n.current
	if id != "" {
		n.steps[id] = true
	}
	todo := n.lines[id][n.shown[id]:]
	n.shown[id] = len(n.lines[id])
	n.mu.Unlock()
	for _, l := range todo {
		if label, text := n.describeLine(l, true); label != "" {
			n.branch(label, text)
		}
	}
}

// decided is the current proposal's first decision's action.
func (n *mcpNarrator) decided() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.lines[n.current] {
		if l.Type == "decision" && l.Result != nil {
			return l.Result.Action
		}
	}
	return ""
}

// describeLine is a log line as a step's branch. In a step (live) only
// the lines fulfiller writes before its answer are told — the decision,
// escalated, fulfilling, rejected — so that a step reads the same every
// time; the approvals the card's answer tells.
func (n *mcpNarrator) describeLine(l logLine, live bool) (label, text string) {
	switch {
	case l.Type == "decision" && l.Result != nil:
		d := l.Result
		text = d.Action
		if d.Reason != "" {
			text += " " + d.Reason
		}
		if d.Action == "escalate" {
			text += fmt.Sprintf(" to %s (quorum %d)", strings.Join(d.Approvers, ", "), max(d.Quorum, 1))
		}
		if d.Message != "" {
			text += ": " + d.Message
		}
		text = n.paint(ansiCyan, text) + " " + n.paint(ansiDim, "(policy "+time.Duration(l.LatencyNS).Round(time.Microsecond).String()+")")
		if l.Input != nil && l.Input.Tool.Changed {
			text += "\n" + strings.Repeat(" ", 17) + n.paint(ansiYellow, "input.tool.changed: true (pinned "+short(l.Input.Tool.PinnedDigest)+"…, now "+short(l.Input.Tool.Digest)+"…)")
		}
		return "decided", text
	case l.Stage == "escalated":
		return "escalated", n.paint(ansiYellow, "to "+strings.Join(l.By, ", "))
	case l.Stage == "fulfilling":
		return "fulfilling", "tools/call to " + l.Target
	case l.Stage == "rejected":
		return "rejected", n.paint(ansiRed, l.Reason)
	case live:
		return "", ""
	case l.Type == "approval":
		what := l.Action
		if l.Approve != nil && *l.Approve {
			what = "approves"
		} else if l.Action == "accept" {
			what = "does not approve"
		}
		if l.Reason != "" {
			what += ": " + l.Reason
		}
		return "answered", l.Approver + " " + what
	case l.Stage == "fulfilled":
		return "fulfilled", l.Status
	case l.Stage == "approved":
		return "approved", "by " + strings.Join(l.By, ", ")
	}
	return l.Stage, l.Message
}

func (n *mcpNarrator) summary(results []mcpResult) {
	fmt.Fprintln(n.out, n.paint(ansiBold, "summary"))
	tw := tabwriter.NewWriter(n.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, " #\ttool\tdecision\toutcome\t")
	ok := 0
	for _, r := range results {
		mark := "✓"
		if !r.ok {
			mark = "✗"
		} else {
			ok++
		}
		tool, action := r.step.tool, r.step.action
		if tool == "" {
			tool, action = "tools/list", "(passes through)"
		}
		fmt.Fprintf(tw, "%2d\t%s\t%s\t%s\t%s\n", r.n, tool, action, r.got, mark)
	}
	tw.Flush()
	fmt.Fprintf(n.out, "\n%d of %d steps ended as the starter policy says.\n\n", ok, len(results))
}

// decisionLog prints the log's lines, one each, in the order written.
func (n *mcpNarrator) decisionLog(lines []logLine, kept string) {
	where := "a temporary file; --decision-log PATH keeps it"
	if kept != "" {
		where = kept
	}
	fmt.Fprintf(n.out, "%s %s\n", n.paint(ansiBold, "the decision log"), n.paint(ansiDim, fmt.Sprintf("(%d JSON lines in %s; a decision or outcome names front_end \"mcp\", the proposer, target and tool, an approval the proposal_id)", len(lines), where)))
	tw := tabwriter.NewWriter(n.out, 0, 0, 2, ' ', 0)
	n.mu.Lock()
	stepOf := n.stepOf
	n.mu.Unlock()
	for _, l := range lines {
		label, text := n.describeLine(l, false)
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			text = text[:i]
		}
		step := "step ?"
		if s, ok := stepOf[l.ProposalID]; ok {
			step = fmt.Sprintf("step %d", s)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", step, l.Type, label, l.Tool, text)
	}
	tw.Flush()
}

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
)

// stageApproval marks a step with one human (from the escalation) in a
// proposal's journey; its Message is the line to print.
const stageApproval fulfill.Stage = "approval"

// narrator collects the fulfiller's lifecycle events per proposal and
// prints each proposal's journey once it has ended, so the story reads in
// order even though the fulfiller works concurrently.
type narrator struct {
	out   io.Writer
	color bool

	mu        sync.Mutex
	events    map[string][]fulfill.Event
	approvals map[string][]elicit.Event
	change    chan struct{} // closed and replaced on every event
}

func newNarrator(out io.Writer, color bool) *narrator {
	return &narrator{out: out, color: color, events: map[string][]fulfill.Event{}, approvals: map[string][]elicit.Event{}, change: make(chan struct{})}
}

// Observe implements fulfill.Observer.
func (n *narrator) Observe(e fulfill.Event) {
	n.mu.Lock()
	n.events[e.ProposalID] = append(n.events[e.ProposalID], e)
	close(n.change)
	n.change = make(chan struct{})
	n.mu.Unlock()
}

// ObserveApproval observes the escalations (elicit.Config.Observer):
// each step with a human becomes a line of the proposal's journey.
func (n *narrator) ObserveApproval(e elicit.Event) {
	line := n.describeApproval(e)
	n.mu.Lock()
	n.approvals[e.ProposalID] = append(n.approvals[e.ProposalID], e)
	if line != "" {
		n.events[e.ProposalID] = append(n.events[e.ProposalID], fulfill.Event{Time: e.Time, Stage: stageApproval, ProposalID: e.ProposalID, Message: line})
	}
	close(n.change)
	n.change = make(chan struct{})
	n.mu.Unlock()
}

// opened reports whether an escalation opened for id: the
// notifier then sends its prompt.opened and, in the end, prompt.ended.
func (n *narrator) opened(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.approvals[id] {
		if e.Kind == elicit.EventOpened {
			return true
		}
	}
	return false
}

// waitApprovals waits until count escalation events of kind were seen for id.
func (n *narrator) waitApprovals(ctx context.Context, id string, kind elicit.EventKind, count int) {
	for {
		n.mu.Lock()
		seen := 0
		for _, e := range n.approvals[id] {
			if e.Kind == kind {
				seen++
			}
		}
		ch := n.change
		n.mu.Unlock()
		if seen >= count {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (n *narrator) describeApproval(e elicit.Event) string {
	switch e.Kind {
	case elicit.EventSkipped:
		return pad("skipped") + " " + e.Approver + n.paint(ansiDim, ": "+e.Reason)
	case elicit.EventAsked:
		return pad("prompted") + " " + e.Approver + n.paint(ansiDim, " (elicitation/create)")
	case elicit.EventAnswered:
		var text string
		switch {
		case e.Action == "":
			text = n.paint(ansiRed, e.Approver+"'s client failed: "+e.Reason)
		case e.Approve:
			text = n.paint(ansiGreen, e.Approver+" approves")
		case e.Action == approval.ActionCancel:
			text = n.paint(ansiRed, e.Approver+" dismisses the prompt")
		default:
			text = n.paint(ansiRed, e.Approver+" declines")
		}
		if e.Reason != "" && e.Action != "" {
			text += n.paint(ansiDim, ": "+e.Reason)
		}
		return pad("answered") + " " + text
	case elicit.EventReminded:
		if e.Prompt == nil {
			return ""
		}
		return pad("reminded") + " " + strings.Join(e.Prompt.Asked, ", ") + n.paint(ansiDim, " (no answer yet: the decision's reminders)")
	case elicit.EventEscalated:
		if e.Prompt == nil {
			return ""
		}
		return pad("escalated") + " to " + strings.Join(e.Prompt.Asked, ", ") + n.paint(ansiDim, " (the decision's escalate_to)")
	case elicit.EventDelegated:
		return pad("delegated") + " " + e.Approver + " hands it to " + e.To
	case elicit.EventCancelled:
		return pad("cancelled") + " the prompt at " + e.Approver + n.paint(ansiDim, " (notifications/cancelled: "+e.Reason+")")
	case elicit.EventIgnored:
		return pad("ignored") + " an answer from " + e.From + " for " + e.Approver + ": " + e.Reason
	case elicit.EventForgery:
		return pad("forgery") + " " + n.paint(ansiRed, "an answer for "+e.Approver+" from "+e.From+" is not validly signed; ignored")
	}
	return ""
}

func (n *narrator) waitFor(ctx context.Context, id string, cond func([]fulfill.Event) bool) {
	for {
		n.mu.Lock()
		ok := cond(n.events[id])
		ch := n.change
		n.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

func (n *narrator) waitStage(ctx context.Context, id string, stage fulfill.Stage) {
	n.waitFor(ctx, id, func(es []fulfill.Event) bool {
		for _, e := range es {
			if e.Stage == stage {
				return true
			}
		}
		return false
	})
}

func (n *narrator) waitTerminal(ctx context.Context, id string) {
	n.waitFor(ctx, id, func(es []fulfill.Event) bool {
		return slices.ContainsFunc(es, func(e fulfill.Event) bool { return terminal(e.Stage) })
	})
}

// terminal reports whether stage ends a proposal.
func terminal(stage fulfill.Stage) bool {
	switch stage {
	case fulfill.StageFulfilled, fulfill.StageRejected, fulfill.StageWithdrawn, fulfill.StageSuperseded:
		return true
	}
	return false
}

// ended reports whether proposal id has ended.
func (n *narrator) ended(id string) bool {
	return n.outcome(id) != "not ended"
}

// outcome is how proposal id ended, as a step's want says it
// (fulfilled, rejected:<reason>, withdrawn, superseded), or "not ended".
func (n *narrator) outcome(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.events[id] {
		switch {
		case !terminal(e.Stage):
		case e.Stage == fulfill.StageRejected:
			return "rejected:" + e.Reason
		default:
			return string(e.Stage)
		}
	}
	return "not ended"
}

// take removes and returns the events of one proposal.
func (n *narrator) take(id string) []fulfill.Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	es := n.events[id]
	delete(n.events, id)
	return es
}

const (
	ansiReset  = "\033[0m"
	ansiBold   = "\033[1m"
	ansiDim    = "\033[2m"
	ansiRed    = "\033[31m"
	ansiGreen  = "\033[32m"
	ansiYellow = "\033[33m"
	ansiCyan   = "\033[36m"
)

func (n *narrator) paint(code, s string) string {
	if !n.color {
		return s
	}
	return code + s + ansiReset
}

func (n *narrator) header(url, revision string, tools []fulfill.ToolInfo, notes map[string]string, interactive bool, inboxURL string) {
	fmt.Fprintln(n.out, n.paint(ansiBold, "fulfiller demo")+n.paint(ansiDim, " — an in-process MEW space at "+url))
	fmt.Fprintf(n.out, "policy   examples/policies (revision %s)\n", short(revision))
	byServer := map[string][]string{}
	var servers []string
	for _, t := range tools {
		if _, ok := byServer[t.Server]; !ok {
			servers = append(servers, t.Server)
		}
		byServer[t.Server] = append(byServer[t.Server], t.Name)
	}
	for _, s := range servers {
		fmt.Fprintf(n.out, "tools    %-10s %s\n", s, strings.Join(byServer[s], ", "))
		if note := notes[s]; note != "" {
			fmt.Fprintln(n.out, n.paint(ansiDim, "                    "+note))
		}
	}
	fmt.Fprintln(n.out, "agents   coder and mallory may only propose; fulfiller decides")
	fmt.Fprintln(n.out, "notify   a signed JSON webhook (run --notify) to the demo's receiver on loopback, which verifies every signature")
	switch {
	case interactive && inboxURL != "":
		fmt.Fprintln(n.out, "humans   you are "+alice+": answer the approval requests in your browser at")
		fmt.Fprintln(n.out, "         "+inboxURL)
		fmt.Fprintln(n.out, "         "+bob+" is simulated; oncall-carol is away")
	case interactive:
		fmt.Fprintln(n.out, "humans   you are "+alice+": answer the approval cards below; "+bob+" is simulated; oncall-carol is away")
	default:
		fmt.Fprintln(n.out, "humans   "+alice+" and "+bob+" answer approval requests (simulated; try --interactive or --web); oncall-carol is away")
	}
	fmt.Fprintln(n.out, "         "+lead+" is asked about payments when nobody on call answers within 2s (a demo-only paged target)")
	fmt.Fprintln(n.out)
}

func (n *narrator) step(r result, events []fulfill.Event) {
	mark := n.paint(ansiGreen, "✓")
	if !r.ok {
		mark = n.paint(ansiRed, "✗ want "+r.step.want)
	}
	fmt.Fprintf(n.out, "%s %s %s\n", n.paint(ansiBold, fmt.Sprintf("%2d", r.n)), r.step.title, mark)
	to := "everyone"
	if len(r.step.to) > 0 {
		to = strings.Join(r.step.to, ",")
	}
	fmt.Fprintf(n.out, "   %s %s → %s: %s\n", n.paint(ansiDim, r.id), r.step.from, to, describeCall(r.step.payload))
	for i, e := range events {
		branch := "├─"
		if i == len(events)-1 {
			branch = "└─"
		}
		if line := n.describe(e); line != "" {
			fmt.Fprintf(n.out, "   %s %s\n", n.paint(ansiDim, branch), line)
		}
	}
	for _, line := range r.webhooks {
		fmt.Fprintf(n.out, "      %s\n", n.paint(ansiCyan, line))
	}
	if r.out.Chat != "" {
		fmt.Fprintf(n.out, "      %s\n", n.paint(ansiDim, "chat to "+r.step.from+": "+r.out.Chat))
	}
	fmt.Fprintln(n.out)
}

func (n *narrator) describe(e fulfill.Event) string {
	switch e.Stage {
	case fulfill.StageReceived:
		return "received"
	case fulfill.StageDecided:
		d := e.Decision
		text := string(d.Action)
		if d.Reason != "" {
			text += " " + d.Reason
		}
		if d.Action == "escalate" {
			text += fmt.Sprintf(" to %s (quorum %d)", strings.Join(d.Approvers, ", "), max(d.Quorum, 1))
		}
		if d.Message != "" {
			text += ": " + d.Message
		}
		if e.GrantID != "" {
			text += " [grant " + e.GrantID + "]"
		}
		return fmt.Sprintf("%s %s %s", pad("decided"), n.paint(ansiCyan, text), n.paint(ansiDim, "(policy "+e.Latency.Round(time.Microsecond).String()+")"))
	case fulfill.StageEscalated:
		return pad("escalated") + " " + n.paint(ansiYellow, "to humans: "+strings.Join(e.By, ", "))
	case fulfill.StageApproved:
		return pad("approved") + " by " + strings.Join(e.By, ", ")
	case fulfill.StageGranted:
		if e.GrantID == "" {
			return pad("granted") + " " + n.paint(ansiRed, e.Message)
		}
		return pad("granted") + " " + n.paint(ansiYellow, e.GrantID+" by "+strings.Join(e.By, ", ")+": "+e.Message)
	case fulfill.StageQueued:
		return pad("queued") + " waiting for a free fulfilment slot"
	case fulfill.StageFulfilling:
		return pad("fulfilling") + " mcp/request to " + e.Target
	case fulfill.StageTask:
		if e.Task == nil {
			return ""
		}
		return pad("task") + " " + n.paint(ansiYellow, e.Target+" runs it as MCP task "+short(e.Task.ID)+"…"+taskDetails(*e.Task))
	case fulfill.StageFulfilled:
		if e.RPCError != nil {
			return pad("fulfilled") + " " + n.paint(ansiRed, "tool error "+string(e.RPCError))
		}
		relayed := ""
		if e.Task != nil {
			relayed = ", relayed to the proposer"
		}
		return fmt.Sprintf("%s %s %s", pad("fulfilled"), n.paint(ansiGreen, resultText(e.Result)), n.paint(ansiDim, "("+e.Latency.Round(time.Microsecond).String()+relayed+")"))
	case fulfill.StageRejected:
		return pad("rejected") + " " + n.paint(ansiRed, e.Reason)
	case fulfill.StageWithdrawn:
		return pad("withdrawn") + " by the proposer"
	case fulfill.StageSuperseded:
		return pad("superseded") + " " + e.Message
	case fulfill.StageIgnored:
		return pad("ignored") + " " + e.Message + " — no answer is sent"
	case stageApproval:
		return e.Message
	}
	return ""
}

func (n *narrator) summary(results []result) {
	fmt.Fprintln(n.out, n.paint(ansiBold, "summary"))
	tw := tabwriter.NewWriter(n.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, " #\tproposer\ttool\toutcome\t")
	ok := 0
	for _, r := range results {
		mark := "✓"
		if !r.ok {
			mark = "✗"
		} else {
			ok++
		}
		fmt.Fprintf(tw, "%2d\t%s\t%s\t%s\t%s\n", r.n, r.step.from, toolName(r.step.payload), r.got, mark)
	}
	tw.Flush()
	fmt.Fprintf(n.out, "\n%d of %d proposals ended as the policy says.\n", ok, len(results))
}

// taskDetails is what is known of a task beyond its id: " (status, spec
// S), followed until T", leaving out what is unknown rather than printing
// it empty (a status line of a task resumed from an older record).
func taskDetails(t fulfill.TaskInfo) string {
	var parts []string
	if t.Status != "" {
		parts = append(parts, t.Status)
	}
	if t.Spec != "" {
		parts = append(parts, "spec "+t.Spec)
	}
	s := ""
	if len(parts) > 0 {
		s = " (" + strings.Join(parts, ", ") + ")"
	}
	if !t.Deadline.IsZero() {
		s += ", followed until " + t.Deadline.Local().Format("15:04:05")
	}
	return s
}

func pad(s string) string { return fmt.Sprintf("%-10s", s) }

func short(rev string) string {
	if i := strings.LastIndex(rev, ":"); i >= 0 {
		rev = rev[i+1:]
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return rev
}

// describeCall renders a proposal payload as "method tool {args}".
func describeCall(payload string) string {
	var p struct {
		Method string `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal([]byte(payload), &p) != nil || p.Method == "" {
		return payload
	}
	if p.Params.Name == "" {
		return p.Method
	}
	return p.Method + " " + p.Params.Name + " " + string(p.Params.Arguments)
}

func toolName(payload string) string {
	var p struct {
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	_ = json.Unmarshal([]byte(payload), &p)
	if p.Params.Name == "" {
		return "-"
	}
	return p.Params.Name
}

// resultText shows the text of an MCP tool result, one line.
func resultText(raw json.RawMessage) string {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(raw, &r) != nil || len(r.Content) == 0 {
		return string(raw)
	}
	text := strings.ReplaceAll(strings.TrimSpace(r.Content[0].Text), "\n", " ⏎ ")
	if r.IsError {
		return "tool failed: " + text
	}
	return text
}

// note tells something that happens between the steps (an operator's
// action).
func (n *narrator) note(text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.out, "%s %s\n\n", n.paint(ansiBold, "   ⚙"), text)
}

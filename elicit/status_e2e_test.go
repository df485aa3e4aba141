package elicit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/fulfill"
)

// statusOf decodes a status chat's machine-readable part.
func statusOf(t *testing.T, env agent.Envelope) (string, fulfill.ProposalStatus) {
	t.Helper()
	var chat struct {
		Text string                            `json:"text"`
		Meta map[string]fulfill.ProposalStatus `json:"_meta"`
	}
	if err := json.Unmarshal(env.Payload, &chat); err != nil {
		t.Fatal(err)
	}
	return chat.Text, chat.Meta[fulfill.StatusMetaKey]
}

// An escalated proposal's proposer is told, in a chat correlated to the
// proposal, that humans are asked: who, how many, until when.
func TestE2EStatusChatWhenEscalated(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{statusChats: true, escalation: `{"approvers":["alice","bob"],"quorum":2,"timeout":"5m"}`})
	id := w.propose("p-status", writeCall)
	prompt := w.ask("alice")
	chat := w.onWire("the status chat", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.From == "fulfiller" && e.CorrelationID.First() == id
	})
	if len(chat.To) != 1 || chat.To[0] != "coder" {
		t.Errorf("status chat to %v", chat.To)
	}
	text, st := statusOf(t, chat)
	deadline := promptDeadline(t, prompt)
	if st.Version != 1 || st.Proposal != id || st.Stage != fulfill.StatusEscalated || strings.Join(st.Approvers, ",") != "alice,bob" ||
		st.Quorum != 2 || !st.Deadline.Equal(deadline) || st.DeadlineBy != "" || st.Task != nil {
		t.Errorf("status %+v, want escalated to alice,bob (2) until %v", st, deadline)
	}
	if want := "Waiting for approval by alice, bob (2 needed) until " + deadline.UTC().Format(time.RFC3339) + "."; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	if d := time.Until(deadline); d < 4*time.Minute || d > 5*time.Minute {
		t.Errorf("deadline in %v, want the policy's 5m", d)
	}
}

func promptDeadline(t *testing.T, prompt agent.Envelope) time.Time {
	t.Helper()
	var p struct {
		Params struct {
			Meta struct {
				Proposal struct {
					Deadline string `json:"deadline"`
					By       string `json:"deadline_by"`
				} `json:"proposal"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(prompt.Payload, &p); err != nil {
		t.Fatal(err)
	}
	dl, err := time.Parse(time.RFC3339Nano, p.Params.Meta.Proposal.Deadline)
	if err != nil {
		t.Fatalf("prompt deadline: %v", err)
	}
	return dl
}

// A proposal that says it stops waiting in 60s: the human's deadline is
// those 60s, not the policy's 5m; the prompt says the proposer set it,
// and the status chat too. A deadline hint later than the policy's
// changes nothing.
func TestE2EProposerDeadlineHintShortensTheHumansDeadline(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{statusChats: true, escalation: `{"approvers":["alice"],"timeout":"5m"}`})
	sent := time.Now()
	id := w.propose("p-hint", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"},"_meta":{"timeout_ms":60000}}}`)
	prompt := w.ask("alice")
	deadline := promptDeadline(t, prompt)
	if d := deadline.Sub(sent); d < 55*time.Second || d > 61*time.Second {
		t.Errorf("the human's deadline is %v after the proposal, want the proposer's 60s", d)
	}
	if !strings.Contains(string(prompt.Payload), `"deadline_by":"proposer"`) {
		t.Errorf("the prompt does not say the proposer set the deadline: %s", prompt.Payload)
	}
	chat := w.onWire("the status chat", func(e agent.Envelope) bool {
		return e.Kind == agent.KindChat && e.From == "fulfiller" && e.CorrelationID.First() == id
	})
	if _, st := statusOf(t, chat); !st.Deadline.Equal(deadline) || st.DeadlineBy != "proposer" {
		t.Errorf("status %+v, want the proposer's deadline %v", st, deadline)
	}

	late := w.propose("p-late-hint", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/banner","content":"hi"},"_meta":{"deadline":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}}}`)
	p2 := w.ask("alice")
	if d := time.Until(promptDeadline(t, p2)); d < 4*time.Minute || d > 5*time.Minute || strings.Contains(string(p2.Payload), "deadline_by") {
		t.Errorf("a later hint changed the deadline to %v from now (%s)", d, late)
	}
}

// A proposer whose own deadline has (all but) passed is not kept waiting
// for a human who cannot answer in time: reject "timeout", nobody asked.
func TestE2EProposerDeadlinePassedNobodyAsked(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOptions{escalation: `{"approvers":["alice"],"timeout":"5m"}`})
	id := w.propose("p-gone", `{"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"},"_meta":{"deadline":"`+time.Now().Add(-time.Second).UTC().Format(time.RFC3339)+`"}}}`)
	out := w.outcome(id)
	if !out.Rejected || out.Reason != "timeout" {
		t.Fatalf("outcome %+v, want reject timeout", out)
	}
	for _, e := range w.wireSnapshot() {
		if strings.Contains(string(e.Payload), "elicitation/create") && strings.Contains(string(e.Payload), id) {
			t.Errorf("a human was asked: %s", e.Raw)
		}
	}
}

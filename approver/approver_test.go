package approver_test

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/mewkit/fulfiller/agent"
	"github.com/mewkit/fulfiller/approver"
	"github.com/mewkit/fulfiller/elicit"
)

const oneApprover = `{"approvers":["alice"],"message":"production writes need a human","editable":["path","content"]}`

func TestAutoApproveSigned(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, elicit.Keys{"alice": pub})
	var out screen
	w.approver("alice", &approver.Auto{Approve: true, Out: &out}, approver.Options{Key: priv})
	id := w.propose("p-write")
	if o := w.outcome(id); !o.Fulfilled {
		t.Fatalf("outcome %+v", o)
	}
	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	el := w.find("the elicitation", func(e agent.Envelope) bool { return e.ID == ans.CorrelationID.First() })
	var resp struct {
		Result struct {
			Action  string          `json:"action"`
			Content json.RawMessage `json:"content"`
		} `json:"result"`
	}
	_ = json.Unmarshal(ans.Payload, &resp)
	digest, _ := elicit.CallDigest("tools/call", json.RawMessage(`{"name":"write_file","arguments":{"path":"/srv/prod/motd","content":"hi"}}`))
	if err := elicit.Verify(pub, el.ID, digest, resp.Result.Action, resp.Result.Content); err != nil {
		t.Errorf("alice's answer %s does not verify: %v", ans.Payload, err)
	}
	waitFor(t, "auto", out.String, "approved   p-write: coder → write_file on fs")
}

func TestAutoDeclineWithReasonSigned(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, elicit.Keys{"alice": pub})
	w.approver("alice", &approver.Auto{Reason: "frozen for the release"}, approver.Options{Key: priv})
	id := w.propose("p-write")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	if chat := w.chat(id); chat != "alice declined: frozen for the release" {
		t.Errorf("chat %q", chat)
	}
}

func TestAutoDeclineSigned(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	w := newWorld(t, oneApprover, elicit.Keys{"alice": pub})
	w.approver("alice", &approver.Auto{}, approver.Options{Key: priv, Limit: 1})
	id := w.propose("p-write")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	ans := w.find("alice's answer", func(e agent.Envelope) bool {
		return e.From == "alice" && e.Kind == agent.KindResponse && strings.Contains(string(e.Payload), `"action"`)
	})
	if !strings.Contains(string(ans.Payload), `"result":{"action":"decline","content":{"signature":"`) {
		t.Errorf("decline %s", ans.Payload)
	}
}

// TestTerminalApproveWithEdits drives the card UI through a pipe, as a
// script or a person typing lines would.
func TestTerminalApproveWithEdits(t *testing.T) {
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "a approve · e edit · d decline · c dismiss · q quit › ")
	for _, want := range []string{
		"▌ approval requested — p-write",
		"proposer   coder",
		"server     fs",
		"tool       write_file — Write a file, replacing it if it exists",
		"    {\n      \"path\": \"/srv/prod/motd\",\n      \"content\": \"hi\"\n    }",
		"policy     production writes need a human",
		"digest     56dcae76b714",
		"editable   path (string), content (string)",
		" left)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("card lacks %q:\n%s", want, out.String())
		}
	}
	io.WriteString(keys, "e\n")
	waitFor(t, "the path prompt", out.String, "path (string) [/srv/prod/motd]: ")
	io.WriteString(keys, "/srv/prod/motd.bak\n")
	waitFor(t, "the content prompt", out.String, "content (string) [hi]: ")
	io.WriteString(keys, "\n")
	waitFor(t, "the reason prompt", out.String, "reason (optional): ")
	io.WriteString(keys, "keep the old one\n")
	if o := w.outcome(id); !o.Fulfilled || string(o.Result) != `{"content":[{"type":"text","text":"wrote 2 bytes to /srv/prod/motd.bak"}]}` {
		t.Fatalf("outcome %+v %s", o, o.Result)
	}
	waitFor(t, "the confirmation", out.String, `✓ sent approved with path="/srv/prod/motd.bak" — p-write: coder → write_file on fs`)
}

func TestTerminalCardWithdrawn(t *testing.T) {
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "› ")
	if err := w.prop.Withdraw(w.ctx, id, "no_longer_needed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the withdrawal", out.String, "q quit › \n✗ ended p-write: coder → write_file on fs — withdrawn by the proposer\n")
}

func TestTerminalDeclineWithReason(t *testing.T) {
	w := newWorld(t, oneApprover, nil)
	in, keys := io.Pipe()
	t.Cleanup(func() { keys.Close() })
	var out screen
	w.approver("alice", &approver.Terminal{In: in, Out: &out}, approver.Options{})
	id := w.propose("p-write")
	waitFor(t, "the card", out.String, "› ")
	io.WriteString(keys, "x\n") // not a choice: help, then the prompt again
	waitFor(t, "the help", out.String, "a approve as shown")
	io.WriteString(keys, "d\n")
	waitFor(t, "the reason prompt", out.String, "reason, sent to the proposer (optional): ")
	io.WriteString(keys, "use the staging copy\n")
	if o := w.outcome(id); o.Reason != "disagree" {
		t.Fatalf("outcome %+v", o)
	}
	if chat := w.chat(id); chat != "alice declined: use the staging copy" {
		t.Errorf("chat %q", chat)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/alice.key"
	line, err := approver.WriteKeyFile(path, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	key, err := approver.LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := approver.PublicLine("alice", key); got != line || !strings.HasPrefix(line, "alice ") {
		t.Errorf("public line %q, want %q", got, line)
	}
	keys, err := elicit.ParseKeys(strings.NewReader(line + "\n"))
	if err != nil || !keys["alice"].Equal(key.Public()) {
		t.Errorf("the printed line is not a keys file line: %v", err)
	}
	if _, err := approver.WriteKeyFile(path, "alice", nil); !os.IsExist(err) {
		t.Errorf("overwrote a key: %v", err)
	}
	_ = os.Chmod(path, 0o644)
	if _, err := approver.LoadKey(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("loaded a world-readable key: %v", err)
	}
	if _, _, err := approver.GenerateKey("al ice", nil); err == nil {
		t.Error("an id with a space")
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		f    approver.Field
		in   string
		want string
	}{
		{approver.Field{Name: "n", Type: "integer"}, " 42 ", "42"},
		{approver.Field{Name: "n", Type: "integer"}, "4.5", "error: n must be a whole number"},
		{approver.Field{Name: "x", Type: "number"}, "4.5", "4.5"},
		{approver.Field{Name: "x", Type: "number"}, "lots", "error: x must be a number"},
		{approver.Field{Name: "b", Type: "boolean"}, "Yes", "true"},
		{approver.Field{Name: "b", Type: "boolean"}, "maybe", "error: b must be yes or no"},
		{approver.Field{Name: "s", Type: "string"}, "<a&b>", `"<a&b>"`},
		{approver.Field{Name: "e", Type: "string", Enum: []string{"x", "y"}}, "z", "error: e must be one of x, y"},
	} {
		v, err := approver.ParseValue(tc.f, tc.in)
		got := string(v)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want {
			t.Errorf("ParseValue(%s %q) = %s, want %s", tc.f.Type, tc.in, got, tc.want)
		}
	}
}

func TestResponseRefusesDigestMismatch(t *testing.T) {
	env := agent.Envelope{ID: "fulfiller-elicit-1", From: "fulfiller", Kind: agent.KindRequest, Payload: json.RawMessage(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object","properties":{"approve":{"type":"boolean"}},"required":["approve"]},"_meta":{"proposal":{"id":"p","from":"coder","method":"tools/call","params":{"name":"read_file"},"digest":"` + strings.Repeat("0", 64) + `","deadline":"2030-01-01T00:00:00Z"}}}}`)}
	c, err := approver.ParseCard(env)
	if err != nil {
		t.Fatal(err)
	}
	if c.DigestOK {
		t.Fatal("a wrong digest was taken as right")
	}
	if _, err := approver.Response(c, approver.Answer{Action: elicit.ActionAccept, Approve: true}, nil); err != approver.ErrDigestMismatch {
		t.Errorf("approve: %v", err)
	}
	r, err := approver.Response(c, approver.Answer{Action: elicit.ActionDecline}, nil)
	if err != nil || string(r.Payload) != `{"jsonrpc":"2.0","id":3,"result":{"action":"decline"}}` || r.CorrelationID.First() != "fulfiller-elicit-1" || r.To[0] != "fulfiller" {
		t.Errorf("decline %s %v", r.Payload, err)
	}
}

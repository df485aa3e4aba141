package loadtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMix(t *testing.T) {
	m, err := ParseMix("fulfil=60, reject=30,invalid=10")
	if err != nil || m != (Mix{60, 30, 10}) {
		t.Fatalf("ParseMix = %+v, %v", m, err)
	}
	if m, err := ParseMix("reject=1"); err != nil || m != (Mix{Reject: 1}) {
		t.Fatalf("ParseMix(reject=1) = %+v, %v", m, err)
	}
	for _, bad := range []string{"", "fulfil=0", "fulfil", "fulfil=-1", "escalate=5", "reject=1,reject=2", "fulfil=x"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q): no error", bad)
		}
	}
}

func TestMixCountMatchesSchedule(t *testing.T) {
	m := Mix{Fulfil: 60, Reject: 30, Invalid: 10}
	s := m.schedule()
	for _, n := range []int{0, 1, 99, 100, 101, 12345} {
		var want [numKinds]int
		for seq := range n {
			want[s[seq%len(s)]]++
		}
		for k := range KindFile {
			if got := m.Count(n, k); got != want[k] {
				t.Errorf("Count(%d, %s) = %d, want %d", n, k, got, want[k])
			}
		}
	}
	if got := m.Count(1000, KindInvalid); got != 100 {
		t.Errorf("invalid in 1000 = %d, want 100", got)
	}
}

func TestReadProposals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.jsonl")
	lines := []string{
		`# a comment`,
		`{"protocol":"mew/v0.4","id":"x","from":"coder","to":["fs"],"kind":"mcp/proposal","payload":{"method":"tools/call","params":{"name":"read_file"}}}`,
		``,
		`{"method":"tools/list"}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := ReadProposals(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("got %d proposals, want 2", len(ps))
	}
	if string(ps[0].Payload) != `{"method":"tools/call","params":{"name":"read_file"}}` || len(ps[0].To) != 1 || ps[0].To[0] != "fs" {
		t.Errorf("envelope line read as %s to %v", ps[0].Payload, ps[0].To)
	}
	if string(ps[1].Payload) != `{"method":"tools/list"}` || ps[1].To != nil {
		t.Errorf("bare payload read as %s to %v", ps[1].Payload, ps[1].To)
	}
	if err := os.WriteFile(path, []byte("{\"method\":\"x\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadProposals(path); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("bad line: err %v, want it to name line 2", err)
	}
}

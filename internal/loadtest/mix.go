package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// Kind is the sort of synthetic proposal the generator sends. The example
// policies answer each kind in a known way, which is what makes a run
// checkable: a fulfil is a read-only call (fulfilled, or busy under load),
// a reject is a write no rule allows (reject policy), an invalid one has
// no method (reject invalid, before any policy runs).
type Kind int

// The kinds of synthetic proposal, in the order --mix names them.
const (
	KindFulfil Kind = iota
	KindReject
	KindInvalid
	KindFile // a proposal read from --from
	numKinds
)

var kindNames = [numKinds]string{"fulfil", "reject", "invalid", "file"}

func (k Kind) String() string { return kindNames[k] }

// Payloads of the synthetic kinds: what a coding agent proposes to the
// sample file server that the bench starts (as "fs").
var synthetic = [...]json.RawMessage{
	KindFulfil:  json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}}`),
	KindReject:  json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"/srv/dev/app/config.yaml","content":"listen: :9090\n"}}}`),
	KindInvalid: json.RawMessage(`{"jsonrpc":"2.0","id":1,"params":{"name":"read_file","arguments":{"path":"/srv/app/config.yaml"}}}`),
}

// Mix is the share of each synthetic kind, as weights (they need not add
// up to 100).
type Mix struct {
	Fulfil, Reject, Invalid int
}

// DefaultMix is a realistic day: most proposals are fine, many are not
// allowed, a few are broken.
var DefaultMix = Mix{Fulfil: 60, Reject: 30, Invalid: 10}

// String renders the mix the way ParseMix reads it.
func (m Mix) String() string {
	return fmt.Sprintf("fulfil=%d,reject=%d,invalid=%d", m.Fulfil, m.Reject, m.Invalid)
}

// ParseMix reads "fulfil=60,reject=30,invalid=10". Kinds left out get
// weight 0; at least one weight must be positive.
func ParseMix(s string) (Mix, error) {
	var m Mix
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return Mix{}, fmt.Errorf("%q: want kind=weight", part)
		}
		name = strings.TrimSpace(name)
		w, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || w < 0 {
			return Mix{}, fmt.Errorf("%q: weight must be a whole number ≥ 0", part)
		}
		if seen[name] {
			return Mix{}, fmt.Errorf("%q given twice", name)
		}
		seen[name] = true
		switch name {
		case "fulfil", "fulfill":
			m.Fulfil = w
		case "reject":
			m.Reject = w
		case "invalid":
			m.Invalid = w
		default:
			return Mix{}, fmt.Errorf("unknown kind %q (want fulfil, reject, invalid)", name)
		}
	}
	if m.Fulfil+m.Reject+m.Invalid == 0 {
		return Mix{}, errors.New("no kind has a positive weight")
	}
	return m, nil
}

// schedule is the order of kinds: proposal seq has kind
// schedule[seq%len]. It is a fixed shuffle (same seed every run), so two
// runs with the same flags send exactly the same proposals and the counts
// by kind are known in advance.
func (m Mix) schedule() []Kind {
	var s []Kind
	for k, w := range []int{m.Fulfil, m.Reject, m.Invalid} {
		for range w {
			s = append(s, Kind(k))
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s
}

// Count reports how many of the first n proposals have kind k.
func (m Mix) Count(n int, k Kind) int {
	s := m.schedule()
	full, rest := n/len(s), n%len(s)
	c := 0
	for i, sk := range s {
		if sk == k {
			c += full
			if i < rest {
				c++
			}
		}
	}
	return c
}

// ReadProposals reads a JSONL file of proposals for --from: one JSON
// object a line, either a whole mcp/proposal envelope (its payload and to
// are used; id and from are the generator's) or a bare payload
// ({"method":…,"params":…}). Blank lines and lines starting with # are
// skipped.
func ReadProposals(path string) ([]FileProposal, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []FileProposal
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON object: %w", path, line, err)
		}
		p := FileProposal{Payload: json.RawMessage(bytes.Clone(b))}
		if payload, ok := obj["payload"]; ok {
			if _, isEnvelope := obj["kind"]; isEnvelope {
				p.Payload = payload
				if to, ok := obj["to"]; ok {
					if err := json.Unmarshal(to, &p.To); err != nil {
						return nil, fmt.Errorf("%s:%d: to: %w", path, line, err)
					}
				}
			}
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no proposals in the file", path)
	}
	return out, nil
}

// FileProposal is one proposal from a --from file.
type FileProposal struct {
	To      []string
	Payload json.RawMessage
}

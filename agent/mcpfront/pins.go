package mcpfront

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/gowebpki/jcs"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Pins keeps the tool definitions first seen of each upstream, so that a
// definition changed under the user (a rug pull) is noticed. The store
// implements it (shared by every instance on one --state); MemPins is
// the in-process one.
type Pins interface {
	// Pin records, for each tool of digests (name → Digest) that server
	// has none pinned for, the digest given, and returns the digests
	// pinned for all of them (the old ones where they differ). A
	// definition is replaced only by Accept.
	Pin(ctx context.Context, server string, digests map[string]string) (pinned map[string]string, err error)
	// Accept records digests as server's definitions, replacing the
	// pinned ones (`fulfiller mcp accept-tools NAME`).
	Accept(ctx context.Context, server string, digests map[string]string) error
}

// MemPins is Pins in memory.
type MemPins struct {
	mu sync.Mutex
	m  map[string]map[string]string
}

// Pin implements Pins.
func (p *MemPins) Pin(_ context.Context, server string, digests map[string]string) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[string]string{}
	}
	s := p.m[server]
	if s == nil {
		s = map[string]string{}
		p.m[server] = s
	}
	out := make(map[string]string, len(digests))
	for name, d := range digests {
		if old, ok := s[name]; ok {
			out[name] = old
			continue
		}
		s[name] = d
		out[name] = d
	}
	return out, nil
}

// Accept implements Pins.
func (p *MemPins) Accept(_ context.Context, server string, digests map[string]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[string]string{}
	}
	if p.m[server] == nil {
		p.m[server] = map[string]string{}
	}
	maps.Copy(p.m[server], digests)
	return nil
}

// Digest is a tool definition's digest: "sha256:" and the hex SHA-256 of
// the JCS (RFC 8785) form of its name, description, inputSchema and
// annotations, so that the same definition has one digest whatever the
// upstream's key order or spacing, and any change to what the model is
// told (a description, a schema, a hint) changes it.
func Digest(t *mcp.Tool) (string, error) {
	def := struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		InputSchema any    `json:"inputSchema"`
		Annotations any    `json:"annotations"`
	}{t.Name, t.Description, t.InputSchema, t.Annotations}
	raw, err := json.Marshal(def)
	if err != nil {
		return "", fmt.Errorf("tool %q: its definition cannot be read: %w", t.Name, err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("tool %q: its definition cannot be canonicalised: %w", t.Name, err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

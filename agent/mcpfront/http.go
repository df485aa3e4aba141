package mcpfront

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ClientTokens maps the SHA-256 (hex) of a client's bearer token to the
// client's id: what --client-tokens holds, so that the file names who
// may call without holding anything a reader could call with.
type ClientTokens map[string]string

// ReadClientTokens reads a --client-tokens file (ParseClientTokens).
func ReadClientTokens(path string) (ClientTokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--client-tokens: %w", err)
	}
	defer f.Close()
	t, err := ParseClientTokens(f)
	if err != nil {
		return nil, fmt.Errorf("--client-tokens %s: %w", path, err)
	}
	return t, nil
}

// ParseClientTokens reads lines `<client-id> <sha256 hex of its bearer
// token>`; blank lines and lines starting with # are skipped. A client
// may have several tokens (rotation); a hash may name one client only.
func ParseClientTokens(r io.Reader) (ClientTokens, error) {
	t := ClientTokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want `<client-id> <sha256 hex>`", n)
		}
		id, sum := fields[0], strings.ToLower(fields[1])
		if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: %q is not the 64 hex digits of a SHA-256 (`printf %%s TOKEN | sha256sum`)", n, fields[1])
		}
		if other, ok := t[sum]; ok {
			return nil, fmt.Errorf("line %d: the token of %s is %s's too", n, id, other)
		}
		t[sum] = id
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, errors.New("no tokens")
	}
	return t, nil
}

// TokenHash is the hex SHA-256 of a bearer token, as --client-tokens
// lists it.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CheckListen refuses an address other machines can reach unless the
// clients are authenticated: without tokens every client is the same
// "local" one, which only the user's own machine may be.
func CheckListen(addr string, tokens ClientTokens) error {
	if len(tokens) > 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %s is reachable from other machines: give --client-tokens, or listen on 127.0.0.1", addr)
}

// HTTPOptions configures Handler.
type HTTPOptions struct {
	// Tokens authenticate the clients (nil: none, and every client is
	// Config.ClientID; only for a loopback listener, see CheckListen).
	Tokens ClientTokens
	// MaxBodyBytes bounds a request body [1 MiB]; a larger one gets 413.
	MaxBodyBytes int64
	// SessionTimeout closes a session idle this long (its held calls
	// withdrawn) [30m].
	SessionTimeout time.Duration
}

// Handler serves the upstreams over Streamable HTTP at /mcp/NAME, with
// the SDK's protections: DNS rebinding (a loopback listener refuses
// other Host headers) and cross-origin requests (Go's
// CrossOriginProtection: a browser's cross-site request is refused),
// request bodies bounded, and, with Tokens, a bearer token on every
// request (401 otherwise) and each session bound to the token that
// opened it (403 for another).
func (f *Front) Handler(opts HTTPOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	mux := http.NewServeMux()
	for name, u := range f.ups {
		sh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
			u.mu.Lock()
			defer u.mu.Unlock()
			return u.server
		}, &mcp.StreamableHTTPOptions{Logger: f.log, SessionTimeout: opts.SessionTimeout, MaxRequestBodyBytes: opts.MaxBodyBytes})
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-u.ready:
			default:
				u.mu.Lock()
				why := u.down
				u.mu.Unlock()
				http.Error(w, fmt.Sprintf("upstream %s is not up yet: %v", name, why), http.StatusServiceUnavailable)
				return
			}
			if !stampBody(w, r, opts.MaxBodyBytes) {
				return
			}
			sh.ServeHTTP(w, r)
		})
		if opts.Tokens != nil {
			h = auth.RequireBearerToken(opts.Tokens.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
		}
		h = http.NewCrossOriginProtection().Handler(h)
		mux.Handle("/mcp/"+name, h)
	}
	return mux
}

// verify is the bearer token verifier: the session is bound to the
// token's hash (UserID), and the client's id rides in Extra.
func (t ClientTokens) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	sum := TokenHash(token)
	id, ok := t[sum]
	if !ok {
		return nil, fmt.Errorf("%w: unknown bearer token", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: sum, Extra: map[string]any{clientKey: id}}, nil
}

const clientKey = "fulfiller/client"

// clientOf is the client id a token named (ok false: no token).
func clientOf(ti *auth.TokenInfo) (string, bool) {
	if ti == nil {
		return "", false
	}
	id, ok := ti.Extra[clientKey].(string)
	return id, ok && id != ""
}

// stampBody reads the (bounded) body of a POST and stamps a tools/call
// in it with its JSON-RPC id (rpcIDHeader), as stampTransport does for
// stdio. It answers 413 itself for a body over the bound, and leaves
// anything it cannot read for the SDK to answer.
func stampBody(w http.ResponseWriter, r *http.Request, limit int64) bool {
	r.Header.Del(rpcIDHeader) // the client's word is not taken for it
	if r.Method != http.MethodPost || r.Body == nil {
		return true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
			return false
		}
		http.Error(w, "the request body could not be read", http.StatusBadRequest)
		return false
	}
	if id, ok := toolsCallID(body); ok {
		r.Header.Set(rpcIDHeader, id)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return true
}

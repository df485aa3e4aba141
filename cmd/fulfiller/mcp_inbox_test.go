//go:build unix

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/internal/passkeytest"
	"github.com/mewkit/fulfiller/internal/poll"
)

// mcpAlicePolicy asks alice (not the person at the client) about a
// delete, with a grant on offer; a delete a grant covers runs.
const mcpAlicePolicy = `package fulfiller

import rego.v1

default decision := {"action": "reject", "reason": "policy", "message": "no rule allows this"}

decision := {"action": "escalate", "approvers": ["alice"], "message": "a delete needs alice",
	"grantable": {"max_ttl": "1h", "scope": ["proposer", "tool"]}} if {
	input.tool.name == "delete_path"
	count(input.grants) == 0
}

decision := {"action": "fulfill"} if {
	input.tool.name == "delete_path"
	count(input.grants) > 0
}
`

// freePort is a loopback port nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestMCPInboxApprovers is issue 40's approvers through the binary:
// `fulfiller mcp --inbox ADDR --inbox-dir DIR` hosts the team inbox,
// and a call the policy asks alice about (not @caller) is held until
// she answers there, signed in with her passkey (a software one, over
// the inbox's API as the page uses it). Her decline refuses the call
// "disagree"; her approval with a grant runs it (the client gets the
// upstream's exact result), `grants list --http` shows her grant, and
// the next delete runs on it without asking. --notify's webhook hears
// each prompt open and end.
func TestMCPInboxApprovers(t *testing.T) {
	tmp := t.TempDir()
	files, inboxDir := filepath.Join(tmp, "files"), filepath.Join(tmp, "inbox")
	for _, d := range []string{files, inboxDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"b.txt", "c.txt"} {
		if err := os.WriteFile(filepath.Join(files, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy, tokenFile, secretFile := filepath.Join(tmp, "p.rego"), filepath.Join(tmp, "http.token"), filepath.Join(tmp, "hook.secret")
	for name, body := range map[string]string{policy: mcpAlicePolicy, tokenFile: "ops-secret-token\n", secretFile: "hook-s3cret\n"} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inboxPort, httpPort := freePort(t), freePort(t)
	inbox, origin := "http://127.0.0.1:"+inboxPort, "http://localhost:"+inboxPort
	alice := passkeytest.New(t, "localhost", origin)
	alice.Enrol(t, inboxDir, "alice")
	hook := &hookReceiver{secret: []byte("hook-s3cret")}
	hookSrv := httptest.NewServer(hook)
	t.Cleanup(hookSrv.Close)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := startMCPWithInbox(ctx, t, tmp, origin, "mcp", "--policy", policy, "--state", filepath.Join(tmp, "state"), "--name", "files",
		"--inbox", "127.0.0.1:"+inboxPort, "--inbox-dir", inboxDir,
		"--http", "127.0.0.1:"+httpPort, "--http-token-file", tokenFile,
		"--notify", hookSrv.URL+"/hook", "--notify-secret-file", secretFile,
		"--", "env", mcpFilesEnv+"="+files, exe)
	s := passkeytest.SignIn(t, inbox, "alice", alice)
	call := func(path string) <-chan *mcp.CallToolResult {
		out := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_path", Arguments: map[string]any{"path": path}})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
			}
			out <- res
		}()
		return out
	}

	// Declined: refused "disagree", the file still there.
	held := call("b.txt")
	req := s.OpenCard()
	select {
	case res := <-held:
		t.Fatalf("answered before alice: %q", resultText(res))
	default:
	}
	if code, msg := s.Answer(req, map[string]any{"action": "decline"}); code != 200 {
		t.Fatalf("alice's decline: %d %s", code, msg)
	}
	if res := <-held; !res.IsError || resultText(res) != "fulfiller refused this call (disagree): alice declined" {
		t.Errorf("after alice's decline: isError %v %q", res.IsError, resultText(res))
	}
	if _, err := os.Stat(filepath.Join(files, "b.txt")); err != nil {
		t.Errorf("b.txt after a declined delete: %v", err)
	}

	// Approved, with a grant: the upstream's result, exactly.
	held = call("b.txt")
	req = s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true, "grant": "1h"}); code != 200 {
		t.Fatalf("alice's approval: %d %s", code, msg)
	}
	if res := <-held; res.IsError || resultText(res) != "deleted" {
		t.Errorf("after alice's approval: isError %v %q, want the upstream's \"deleted\"", res.IsError, resultText(res))
	}
	if _, err := os.Stat(filepath.Join(files, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("b.txt after an approved delete: %v", err)
	}

	// The grant, as the operator sees it.
	env := map[string]string{"FULFILLER_HTTP": "127.0.0.1:" + httpPort, "FULFILLER_HTTP_TOKEN": "ops-secret-token"}
	stdout, errOut, code := cliEnv(t, "", env, "grants", "list", "--format", "json")
	var doc ops.GrantList
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || len(doc.Grants) != 1 {
		t.Fatalf("grants list --http: exit %d %s\n%s", code, errOut, stdout)
	}
	if g := doc.Grants[0]; g.GrantedBy != "alice" || g.Tool != "delete_path" || g.Server != "files" || g.Proposer != "local" || !g.Live {
		t.Errorf("the grant: %+v", g)
	}
	// Covered by it: runs without asking.
	if res := <-call("c.txt"); res.IsError || resultText(res) != "deleted" {
		t.Errorf("a delete the grant covers: isError %v %q", res.IsError, resultText(res))
	}

	// The webhook: each prompt opened and ended, in order.
	poll.Until(t, "four webhook events", func() bool { return len(hook.got()) >= 4 })
	var got []string
	for _, body := range hook.got() {
		var ev struct{ Type, Outcome, Tool, Server, Proposer string }
		_ = json.Unmarshal([]byte(body), &ev)
		got = append(got, strings.Join([]string{ev.Type, ev.Outcome, ev.Tool, ev.Server, ev.Proposer}, " "))
	}
	want := []string{"prompt.opened  delete_path files local", "prompt.ended disagree delete_path files local",
		"prompt.opened  delete_path files local", "prompt.ended approved delete_path files local"}
	if !slices.Equal(got, want) || hook.bad != 0 {
		t.Errorf("webhook events %q (%d badly signed), want %q", got, hook.bad, want)
	}
}

// TestMCPInboxBadFlags: the team inbox's flags are checked before
// anything starts, each refusal naming the flag (exit 2).
func TestMCPInboxBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--state", "memory", "--inbox", "127.0.0.1:0", "--", "x"}, "--inbox-dir is required"},
		{[]string{"mcp", "--state", "memory", "--inbox-dir", dir, "--", "x"}, "--inbox-dir, --inbox-origin and --inbox-tls-cert go with --inbox ADDR"},
		{[]string{"mcp", "--state", "memory", "--inbox-tls-cert", "c.pem", "--inbox-tls-key", "k.pem", "--", "x"}, "--inbox-dir, --inbox-origin and --inbox-tls-cert go with --inbox ADDR"},
		{[]string{"mcp", "--state", "memory", "--inbox", "0.0.0.0:0", "--inbox-dir", dir, "--", "x"}, "--inbox 0.0.0.0:0: plain HTTP only on loopback (127.0.0.1, ::1, localhost), behind a reverse proxy that terminates TLS for --inbox-origin; give --inbox-tls-cert and --inbox-tls-key to serve on 0.0.0.0"},
		{[]string{"mcp", "--state", "memory", "--inbox", "127.0.0.1:0", "--inbox-dir", dir, "--inbox-tls-cert", "c.pem", "--", "x"}, "--inbox-tls-cert and --inbox-tls-key go together"},
		{[]string{"mcp", "--state", "memory", "--inbox", "0.0.0.0:0", "--inbox-dir", dir, "--inbox-tls-cert", "/nonexistent/c.pem", "--inbox-tls-key", "/nonexistent/k.pem", "--", "x"}, "--inbox-tls-cert /nonexistent/c.pem, --inbox-tls-key /nonexistent/k.pem: open /nonexistent/c.pem"},
		{[]string{"mcp", "--state", "memory", "--inbox", "nowhere", "--inbox-dir", dir, "--", "x"}, `--inbox "nowhere": want host:port`},
		{[]string{"mcp", "--state", "memory", "--inbox", "127.0.0.1:0", "--inbox-dir", dir, "--inbox-origin", "http://inbox.example.com", "--", "x"}, "--inbox-origin http://inbox.example.com: passkeys need https"},
		{[]string{"mcp", "serve", "--listen", "127.0.0.1:0", "--upstream", "fs=cmd:x", "--state", "memory", "--http", "0.0.0.0:9464"}, "--http 0.0.0.0:9464 is reachable from other machines and no token guards the operator API"},
		{[]string{"mcp", "--state", "memory", "--approver-keys", filepath.Join(dir, "nope", "keys"), "--", "x"}, "--approver-keys"},
	} {
		root := newRootCmd()
		var stderr strings.Builder
		root.SetOut(&stderr)
		root.SetErr(&stderr)
		root.SetArgs(c.args)
		err := root.Execute()
		if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 2 naming %q", c.args, exitCode(err), err, c.want)
		}
	}
}

// TestMCPInboxOverTLS: with --inbox-tls-cert and --inbox-tls-key,
// `fulfiller mcp` serves the team inbox over HTTPS itself (what an
// inbox beyond loopback needs, as inbox serve's --tls-cert), its page's
// origin is https://localhost:PORT, and alice, signed in over TLS with
// her passkey, approves a held call that then runs. Plain HTTP on the
// same port is not the inbox.
func TestMCPInboxOverTLS(t *testing.T) {
	tmp := t.TempDir()
	files, inboxDir := filepath.Join(tmp, "files"), filepath.Join(tmp, "inbox")
	for _, d := range []string{files, inboxDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(files, "b.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(tmp, "p.rego")
	if err := os.WriteFile(policy, []byte(mcpAlicePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pool := localhostCert(t, tmp)
	port := freePort(t)
	origin := "https://localhost:" + port
	alice := passkeytest.New(t, "localhost", origin)
	alice.Enrol(t, inboxDir, "alice")

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := startMCPWithInbox(ctx, t, tmp, origin, "mcp", "--policy", policy, "--state", "memory", "--name", "files",
		"--inbox", "127.0.0.1:"+port, "--inbox-dir", inboxDir, "--inbox-tls-cert", certFile, "--inbox-tls-key", keyFile,
		"--", "env", mcpFilesEnv+"="+files, exe)

	// Plain HTTP on the inbox's port gets Go's refusal, not the page.
	if resp, err := http.Get("http://127.0.0.1:" + port + "/"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS server") {
			t.Errorf("plain HTTP to the TLS inbox: %d %q", resp.StatusCode, body)
		}
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatalf("the inbox's page over TLS: %v", err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<html") {
		t.Fatalf("the inbox's page over TLS: %d %.200q", resp.StatusCode, page)
	}

	s := passkeytest.SignInWith(t, client, "https://127.0.0.1:"+port, "alice", alice)
	held := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_path", Arguments: map[string]any{"path": "b.txt"}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		held <- res
	}()
	req := s.OpenCard()
	if code, msg := s.Answer(req, map[string]any{"action": "accept", "approve": true}); code != 200 {
		t.Fatalf("alice's approval over TLS: %d %s", code, msg)
	}
	if res := <-held; res.IsError || resultText(res) != "deleted" {
		t.Errorf("after alice's approval: isError %v %q, want the upstream's \"deleted\"", res.IsError, resultText(res))
	}
	if _, err := os.Stat(filepath.Join(files, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("b.txt after an approved delete: %v", err)
	}
}

// localhostCert writes a self-signed certificate for localhost and
// 127.0.0.1 and its key into dir, and returns a pool that trusts it.
func localhostCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startMCPWithInbox starts the fulfiller binary with args (`mcp …
// --inbox …`), its XDG directories under tmp, connects a go-sdk client
// to it until the test ends, and checks that its stderr names the team
// inbox at origin with alice enrolled (stderr is logged if the test
// fails).
func startMCPWithInbox(ctx context.Context, t *testing.T, tmp, origin string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(fulfillerBinary(t), args...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "XDG_STATE_HOME="+filepath.Join(tmp, "xdgstate"))
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fulfiller mcp's stderr:\n%s", stderr.String())
		}
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-client", Version: "1.0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to fulfiller mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if want := "fulfiller mcp: team inbox on " + origin + "/ (approvers enrolled: alice)"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q", want)
	}
	return cs
}

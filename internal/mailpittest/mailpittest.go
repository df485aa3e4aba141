// Package mailpittest runs Mailpit, a real SMTP server (STARTTLS, AUTH)
// whose HTTP API shows what it received, for the tests that send e-mail:
// notify's, and the binary tests of fulfiller run --notify smtp://.
package mailpittest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// mailpitVersion is the Mailpit the e-mail tests receive with: a real
// SMTP server (STARTTLS, AUTH) whose HTTP API shows what it received.
// Its SMTP server lives in an internal package, so it runs as its own
// process, built once into the user's cache directory (about 45 s on two
// cores; then nothing).
const mailpitVersion = "v1.33.1"

// mailpitEnv names a mailpit binary to use instead.
const mailpitEnv = "FULFILLER_TEST_MAILPIT_BIN"

func mailpitBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(mailpitEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s: %v", mailpitEnv, err)
		}
		return bin
	}
	base, err := os.UserCacheDir()
	if err != nil {
		testenv.Missing(t, "no cache directory to build mailpit into (set %s): %v", mailpitEnv, err)
	}
	dir := filepath.Join(base, "fulfiller", "mailpit-"+mailpitVersion)
	bin := filepath.Join(dir, "mailpit")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "building mailpit needs the go command (or set %s)", mailpitEnv)
	}
	// Built into a temporary directory and renamed: a build cut short
	// leaves no half binary for the next run to trust.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "mailpit-build-")
	if err != nil && os.MkdirAll(filepath.Dir(dir), 0o755) == nil {
		tmp, err = os.MkdirTemp(filepath.Dir(dir), "mailpit-build-")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	cmd := exec.Command(goTool, "install", "github.com/axllent/mailpit@"+mailpitVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install mailpit@%s: %v\n%s", mailpitVersion, err, out)
	}
	t.Logf("built mailpit %s in %s", mailpitVersion, time.Since(start).Round(time.Second))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tmp, "mailpit"), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// freePort is a loopback port nobody listens on right now.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// a pool that trusts it.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// Options say how Mailpit receives.
type Options struct {
	// TLS makes it offer and require STARTTLS, with a certificate for
	// 127.0.0.1 that Server.Pool trusts. Without it, plain SMTP (what
	// fulfiller allows to a loopback relay only).
	TLS bool
	// Auth, "user:password", makes it require that login.
	Auth string
}

// Server is a running Mailpit.
type Server struct {
	SMTP string         // host:port of its SMTP server
	API  string         // base URL of its HTTP API
	Pool *x509.CertPool // trusts its certificate (with TLS)
}

// Start runs Mailpit on loopback until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := mailpitBinary(t)
	dir := t.TempDir()
	smtpAddr, httpAddr := freePort(t), freePort(t)
	args := []string{"--smtp", smtpAddr, "--listen", httpAddr, "--database", filepath.Join(dir, "mail.db"),
		"--disable-version-check", "--smtp-disable-rdns", "--quiet"}
	m := &Server{SMTP: smtpAddr, API: "http://" + httpAddr}
	if opts.TLS {
		var cert, key string
		cert, key, m.Pool = selfSigned(t, dir)
		args = append(args, "--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls")
	}
	if opts.Auth != "" {
		auth := filepath.Join(dir, "smtp-auth")
		if err := os.WriteFile(auth, []byte(opts.Auth+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--smtp-auth-file", auth)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	// Ready when both listen: nothing to wait on but the ports.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(m.API + "/readyz")
		if err == nil {
			resp.Body.Close()
			if c, err := net.Dial("tcp", smtpAddr); err == nil {
				c.Close()
				return m
			}
		}
		select {
		case <-exited:
			t.Fatalf("mailpit exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailpit did not start: %s", out.String())
		}
	}
}

// Message is a received message as Mailpit's API lists it.
type Message struct {
	ID      string `json:"ID"`
	From    struct{ Address string }
	To      []struct{ Address string }
	Subject string
}

// Received waits for n messages and returns those received, newest first.
func (m *Server) Received(t testing.TB, n int) []Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list struct{ Messages []Message }
		resp, err := http.Get(m.API + "/api/v1/messages")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Messages) >= n {
			return list.Messages
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailpit received %d of %d messages", len(list.Messages), n)
		}
		time.Sleep(10 * time.Millisecond) // Mailpit's API has nothing to wait on
	}
}

// Text is the plain-text body of message id.
func (m *Server) Text(t testing.TB, id string) string {
	t.Helper()
	resp, err := http.Get(m.API + "/api/v1/message/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg struct{ Text string }
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	return msg.Text
}

package notify_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"
	"github.com/mewkit/fulfiller/notify"
)

// mailpitVersion is the Mailpit the e-mail tests receive with: a real
// SMTP server (STARTTLS, AUTH) whose HTTP API shows what it received.
// Its SMTP server lives in an internal package, so it runs as its own
// process, built once into the user's cache directory (about 45 s on two
// cores; then nothing).
const mailpitVersion = "v1.33.1"

// mailpitEnv names a mailpit binary to use instead.
const mailpitEnv = "FULFILLER_TEST_MAILPIT_BIN"

func mailpitBinary(t *testing.T) string {
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
func freePort(t *testing.T) string {
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
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
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

// mailpit runs Mailpit on loopback requiring STARTTLS and a login as
// bot/s3cret; it returns the SMTP address, the API's base URL and a pool
// that trusts its certificate.
func mailpit(t *testing.T) (smtpAddr, api string, pool *x509.CertPool) {
	t.Helper()
	bin := mailpitBinary(t)
	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	auth := filepath.Join(dir, "smtp-auth")
	if err := os.WriteFile(auth, []byte("bot:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	smtpAddr, httpAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--smtp", smtpAddr, "--listen", httpAddr, "--database", filepath.Join(dir, "mail.db"),
		"--smtp-tls-cert", cert, "--smtp-tls-key", key, "--smtp-require-starttls", "--smtp-auth-file", auth,
		"--disable-version-check", "--smtp-disable-rdns", "--quiet")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	api = "http://" + httpAddr
	// Ready when both listen: nothing to wait on but the ports.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if c, err := net.Dial("tcp", smtpAddr); err == nil {
				c.Close()
				return smtpAddr, api, pool
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

type mailpitMessage struct {
	ID      string `json:"ID"`
	From    struct{ Address string }
	To      []struct{ Address string }
	Subject string
}

// received waits for n messages at Mailpit's API.
func received(t *testing.T, api string, n int) []mailpitMessage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list struct{ Messages []mailpitMessage }
		resp, err := http.Get(api + "/api/v1/messages")
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
		time.Sleep(10 * time.Millisecond)
	}
}

func messageText(t *testing.T, api, id string) string {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/message/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct{ Text string }
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.Text
}

func TestMailToApproversOverSTARTTLS(t *testing.T) {
	smtpAddr, api, pool := mailpit(t)
	dir := notify.Directory{"alice": {Name: "Alice Liddell", Email: "alice@example.com"}} // bob has no address
	tg := target(t, fmt.Sprintf("smtp://bot@%s?from=fulfiller@example.com", smtpAddr), notify.Options{Directory: dir, SMTPPassword: "s3cret", TLSConfig: &tls.Config{RootCAs: pool}})
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, InboxURL: "https://inbox.example/approve", Metrics: c})
	run(t, n)
	n.Observe(opened(""))
	msgs := received(t, api, 1)
	m := msgs[0]
	if m.From.Address != "fulfiller@example.com" || len(m.To) != 1 || m.To[0].Address != "alice@example.com" {
		t.Errorf("from %s to %+v", m.From.Address, m.To)
	}
	if m.Subject != "[fulfiller] approval needed: coder wants to call write_file on fs" {
		t.Errorf("subject %q", m.Subject)
	}
	text := strings.ReplaceAll(messageText(t, api, m.ID), "\r\n", "\n")
	want := "coder wants to call write_file on fs, and needs 1 approval(s) from: Alice Liddell (alice), bob.\n\n" +
		"Answer before 2026-11-22 10:15:00 UTC.\n\n" +
		"Proposal:    p-write\nCall digest: 56dcae76b714 (compare it with the card before you approve)\n\n" +
		"Open your inbox to answer (sign in there; this link approves nothing):\nhttps://inbox.example/approve#proposal=p-write\n"
	if !strings.HasPrefix(text, want) {
		t.Errorf("body\n%s\nwant it to start with\n%s", text, want)
	}
	if strings.Contains(text, "Arguments") || strings.Contains(text, "/srv/prod/motd") {
		t.Errorf("the arguments are in the mail without notify_arguments:\n%s", text)
	}
	poll.Until(t, "the send counted", func() bool { return c.get("smtp sent") == 1 })

	// With notify_arguments they are in it.
	n.Observe(opened(`{"path":"/srv/prod/motd"}`))
	msgs = received(t, api, 2)
	if text := messageText(t, api, msgs[0].ID); !strings.Contains(text, "Arguments:\r\n{\r\n  \"path\": \"/srv/prod/motd\"\r\n}") {
		t.Errorf("no arguments in\n%s", text)
	}
}

func TestMailWrongPasswordFails(t *testing.T) {
	smtpAddr, _, pool := mailpit(t)
	dir := notify.Directory{"alice": {Email: "alice@example.com"}}
	tg := target(t, fmt.Sprintf("smtp://bot@%s?from=fulfiller@example.com", smtpAddr), notify.Options{Directory: dir, SMTPPassword: "wrong-pass", TLSConfig: &tls.Config{RootCAs: pool}})
	c := newCounts()
	n := notify.New(notify.Config{Targets: []notify.Target{tg}, Metrics: c, Attempts: 2, Backoff: time.Millisecond})
	run(t, n)
	n.Observe(opened(""))
	poll.Until(t, "the failure counted", func() bool { return c.get("smtp failed") == 1 })
}

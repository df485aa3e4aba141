package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mewkit/fulfiller/internal/atomicfile"
)

// A directory several processes share (SharedDir: fulfiller mcp, which
// an MCP client starts once per session). One embedded server serves the
// directory's file store; the process holding the directory's lock hosts
// it on a loopback port, behind a token only the directory's owner can
// read, and every process — the host too — is its client over TCP. Each
// process tries the lock now and then: when the host ends, however it
// ends, the kernel drops its lock, one other process takes it and hosts
// the same store on the same port, and the others' connections find it
// again (their dialer reads the address anew on every dial).
//
// Files in the directory, beside the store:
//
//	fulfiller.lock   the lock (lockDir), with the host's pid
//	fulfiller.token  the clients' token (hex), 0600, made once
//	fulfiller.addr   the host's port, rewritten by each host
const (
	tokenFile = "fulfiller.token"
	addrFile  = "fulfiller.addr"
	// hostTry is how often a process that does not host tries the lock:
	// a failover takes about this long, plus the store's recovery.
	hostTry = 200 * time.Millisecond
)

// share is one process's part in a shared directory: its hosting loop
// and, while it holds the lock, the server it hosts.
type share struct {
	dir   string
	token string
	log   *slog.Logger
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex // guards ns and unlock; held across starting or stopping the server
	ns     *server.Server
	unlock func()
}

// startShared joins dir's shared store: it starts the hosting loop and
// connects to whichever process hosts.
func (s *Store) startShared(ctx context.Context) error {
	dir := s.cfg.Mode.Dir
	if err := mkdirPrivate(dir, s.log); err != nil {
		return err
	}
	token, err := shareToken(dir)
	if err != nil {
		return err
	}
	sh := &share{dir: dir, token: token, log: s.log.With("component", "share"), stop: make(chan struct{}), done: make(chan struct{})}
	s.share = sh
	go sh.run()
	opts := []nats.Option{
		nats.Name("fulfiller " + s.cfg.Member),
		nats.Token(token),
		nats.SetCustomDialer(sh),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(hostTry / 2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Info("the process hosting the shared state ended; another takes over", "dir", dir)
			}
		}),
	}
	nc, err := nats.Connect("nats://127.0.0.1", opts...)
	if err != nil {
		return fmt.Errorf("state: connect to the shared store in %s: %w", dir, err)
	}
	s.nc = nc
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("state: the shared store in %s: no process hosts it: %w", dir, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// shareToken reads dir's client token, making it if there is none: made
// aside and linked into place, so that of two processes making it at
// once both read the one that won.
func shareToken(dir string) (string, error) {
	path := filepath.Join(dir, tokenFile)
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("state: read %s: %w", path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("state: make a token: %w", err)
	}
	if _, err := atomicfile.Create(path, []byte(hex.EncodeToString(raw[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("state: make %s: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("state: read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// run tries the lock until it holds it or the store closes; holding it,
// it hosts until the store closes.
func (sh *share) run() {
	defer close(sh.done)
	t := time.NewTicker(hostTry)
	defer t.Stop()
	for {
		if sh.tryHost() {
			<-sh.stop
			return
		}
		select {
		case <-sh.stop:
			return
		case <-t.C:
		}
	}
}

// tryHost takes the lock and starts the server, reporting whether this
// process now hosts.
func (sh *share) tryHost() bool {
	unlock, err := lockDir(sh.dir)
	if errors.Is(err, ErrDirInUse) {
		return false
	} else if err != nil {
		sh.log.Warn("shared state: the lock cannot be tried", "err", err)
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	select {
	case <-sh.stop:
		unlock()
		return false
	default:
	}
	port := sh.lastPort()
	ns, err := sh.serve(port)
	if err != nil && port != 0 {
		// The port went to another program meanwhile: a new one, which
		// the clients read from the address file.
		ns, err = sh.serve(0)
	}
	if err != nil {
		unlock()
		sh.log.Error("shared state: cannot host the store", "dir", sh.dir, "err", err)
		return false
	}
	addr := ns.Addr().(*net.TCPAddr)
	if err := writeAddr(sh.dir, addr.Port); err != nil {
		ns.Shutdown()
		unlock()
		sh.log.Error("shared state: cannot publish the store's address", "dir", sh.dir, "err", err)
		return false
	}
	sh.ns, sh.unlock = ns, unlock
	sh.log.Debug("hosting the shared state", "dir", sh.dir, "port", addr.Port)
	return true
}

// serve starts the store's server on loopback port (0: any).
func (sh *share) serve(port int) (*server.Server, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		ServerName:    "fulfiller-shared",
		Host:          "127.0.0.1",
		Port:          port,
		Authorization: sh.token,
		JetStream:     true,
		StoreDir:      sh.dir,
		NoSigs:        true,
		NoLog:         true,
		MaxPayload:    embeddedMaxPayload,
	})
	if err != nil {
		return nil, err
	}
	ns.SetLoggerV2(serverLogger{sh.log.With("component", "nats")}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("the server did not start on port %d", port)
	}
	return ns, nil
}

// sharedAddr is the address file's content.
type sharedAddr struct {
	Port int `json:"port"`
	PID  int `json:"pid"`
}

func (sh *share) lastPort() int {
	a, err := readAddr(sh.dir)
	if err != nil {
		return 0
	}
	return a.Port
}

func readAddr(dir string) (sharedAddr, error) {
	var a sharedAddr
	b, err := os.ReadFile(filepath.Join(dir, addrFile))
	if err != nil {
		return a, err
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Port <= 0 {
		return a, fmt.Errorf("%s: not an address: %q", addrFile, b)
	}
	return a, nil
}

// writeAddr replaces the address file in one rename: a reader sees the
// old address or the new, never half of one.
func writeAddr(dir string, port int) error {
	b, _ := json.Marshal(sharedAddr{Port: port, PID: os.Getpid()})
	return atomicfile.Write(filepath.Join(dir, addrFile), b, 0o600)
}

// Dial implements nats.CustomDialer: the host's address is read anew
// each time, so that a client follows the store to a new host.
func (sh *share) Dial(network, _ string) (net.Conn, error) {
	a, err := readAddr(sh.dir)
	if err != nil {
		return nil, fmt.Errorf("no process hosts the shared state yet: %w", err)
	}
	return net.DialTimeout(network, net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port)), time.Second)
}

// hosting reports whether this process hosts the store now.
func (sh *share) hosting() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.ns != nil
}

// close stops trying the lock and, hosting, stops the server (another
// process takes over) and releases the lock.
func (sh *share) close() {
	close(sh.stop)
	<-sh.done
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.ns != nil {
		sh.ns.Shutdown()
		sh.ns.WaitForShutdown()
		sh.ns = nil
	}
	if sh.unlock != nil {
		sh.unlock()
		sh.unlock = nil
	}
}

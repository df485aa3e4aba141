package state

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// testCluster is one three-server JetStream cluster on loopback, shared by
// the package's tests (TestMain) to keep them fast. Tests that stop servers
// restart them before they end.
var testCluster *cluster

func TestMain(m *testing.M) {
	c, err := startCluster(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start NATS cluster:", err)
		os.Exit(1)
	}
	testCluster = c
	code := m.Run()
	c.shutdown()
	os.Exit(code)
}

type cluster struct {
	mu      sync.Mutex
	root    string
	opts    []*server.Options
	servers []*server.Server // nil while stopped
}

func startCluster(n int) (*cluster, error) {
	root, err := os.MkdirTemp("", "state-cluster-")
	if err != nil {
		return nil, err
	}
	c := &cluster{root: root, opts: make([]*server.Options, n), servers: make([]*server.Server, n)}
	// JetStream clustering wants every server's routes at start, so the
	// ports are picked first (a free loopback port each, released just
	// before the server binds it).
	var routes []*url.URL
	ports := make([][2]int, n)
	for i := range n {
		for j := range 2 {
			if ports[i][j], err = freePort(); err != nil {
				return nil, err
			}
		}
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[i][1])})
	}
	for i := range n {
		c.opts[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i),
			Host:       "127.0.0.1",
			Port:       ports[i][0],
			JetStream:  true,
			StoreDir:   fmt.Sprintf("%s/n%d", root, i),
			NoSigs:     true,
			NoLog:      os.Getenv("STATE_TEST_NATS_LOG") == "",
			SyncAlways: true,
			MaxPayload: embeddedMaxPayload,
			Cluster:    server.ClusterOpts{Name: "state-test", Host: "127.0.0.1", Port: ports[i][1]},
			Routes:     routes,
		}
	}
	// Start them together: each waits for its peers to form the system
	// account's routes.
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- c.start(i) }()
	}
	for range n {
		if err := <-errs; err != nil {
			c.shutdown()
			return nil, err
		}
	}
	if err := c.waitMetaLeader(30 * time.Second); err != nil {
		c.shutdown()
		return nil, err
	}
	return c, nil
}

// start starts (or restarts) server i on its ports, so clients' URL lists
// stay valid.
func (c *cluster) start(i int) error {
	o := c.opts[i].Clone()
	s, err := server.NewServer(o)
	if err != nil {
		return err
	}
	if !o.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("server %d did not start", i)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stop kills server i without a graceful leave (lame duck skipped).
func (c *cluster) stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (c *cluster) shutdown() {
	for i := range c.servers {
		c.stop(i)
	}
	os.RemoveAll(c.root)
}

func (c *cluster) urls() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

func (c *cluster) waitMetaLeader(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, s := range c.servers {
			if s != nil && s.JetStreamIsLeader() {
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no JetStream meta leader within %v", d)
}

// waitCurrent waits until server i has caught up with the JetStream meta
// leader after a restart.
func (c *cluster) waitCurrent(i int, d time.Duration) error {
	return eventually(d, func() error {
		c.mu.Lock()
		s := c.servers[i]
		c.mu.Unlock()
		if s == nil || !s.JetStreamIsCurrent() {
			return fmt.Errorf("server %d not current with the meta leader within %v", i, d)
		}
		return nil
	})
}

// eventually polls cond until it returns nil or d passes; it returns the
// last error. For waiting on the cluster, never for asserting timings.
func eventually(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// backend opens stores of one mode for the contract tests.
type backend struct {
	name string
	open func(t *testing.T, member string, mut ...func(*Config)) *Store
}

var spaceSeq sync.Mutex
var spaceN int

// uniqueSpace gives each test its own buckets on the shared cluster.
func uniqueSpace(t *testing.T) string {
	spaceSeq.Lock()
	defer spaceSeq.Unlock()
	spaceN++
	return fmt.Sprintf("%s.%d", t.Name(), spaceN)
}

func openStore(t *testing.T, cfg Config, mut ...func(*Config)) *Store {
	t.Helper()
	for _, f := range mut {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Mode, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backends: memory, an embedded DIR store, and the three-server cluster
// with replicas 3. Stores opened by one backend in one test share a space
// (and, for the cluster, buckets).
func backends(t *testing.T) []backend {
	space := uniqueSpace(t)
	return []backend{
		{"memory", func(t *testing.T, member string, mut ...func(*Config)) *Store {
			return openStore(t, Config{Mode: Mode{Kind: Memory}, Space: space, Member: member}, mut...)
		}},
		{"dir", func(t *testing.T, member string, mut ...func(*Config)) *Store {
			return openStore(t, Config{Mode: Mode{Kind: Dir, Dir: t.TempDir()}, Space: space, Member: member}, mut...)
		}},
		{"cluster", func(t *testing.T, member string, mut ...func(*Config)) *Store {
			m, err := ParseMode(testCluster.urls())
			if err != nil {
				t.Fatal(err)
			}
			return dropOnCleanup(t, openStore(t, Config{Mode: m, Space: space, Member: member, Replicas: 3}, mut...))
		}},
	}
}

// dropOnCleanup deletes the store's buckets when the test ends: every
// replicated bucket is a Raft group the shared cluster would otherwise keep
// beating for the rest of the run.
func dropOnCleanup(t *testing.T, s *Store) *Store {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, kind := range []string{"seen", "pending", "outbox", "members", "meta"} {
			s.js.DeleteKeyValue(ctx, bucketName(kind, s.cfg.Space))
		}
	})
	return s
}

func clusterStore(t *testing.T, space, member string, mut ...func(*Config)) *Store {
	t.Helper()
	m, err := ParseMode(testCluster.urls())
	if err != nil {
		t.Fatal(err)
	}
	return dropOnCleanup(t, openStore(t, Config{Mode: m, Space: space, Member: member, Replicas: 3}, mut...))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

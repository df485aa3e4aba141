// Package natstest starts real NATS JetStream servers for tests: a
// cluster of servers on loopback, with servers that can be stopped (killed,
// no graceful leave) and started again on the same ports and store
// directories, so clients' URL lists stay valid.
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxPayload is the servers' max_payload: pending records hold a proposal
// frame of up to --max-frame (1 MiB by default) and more.
const MaxPayload = 8 << 20

// Cluster is n JetStream servers on loopback, clustered with each other.
type Cluster struct {
	mu      sync.Mutex
	root    string
	opts    []*server.Options
	servers []*server.Server // nil while stopped
}

// Options tune StartCluster.
type Options struct {
	// Log lets the servers log to stderr.
	Log bool
	// NoSync leaves fsync to the servers' default interval instead of
	// syncing every write: for tests of callers that do not test the
	// servers' durability and would otherwise wait on a busy disk.
	NoSync bool
}

// StartCluster starts n clustered servers with file storage (synced
// always unless o.NoSync) and waits for a JetStream meta leader. One
// server runs standalone: for callers that share a store between members
// and do not test replication, at a third of the cost.
//
// The ports are picked before the servers bind them (JetStream
// clustering wants every server's routes at start), so another process
// can take one in between; a cluster that does not start is started
// again on new ports, up to startAttempts times.
func StartCluster(n int, name string, o Options) (*Cluster, error) {
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = startCluster(n, name, o); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// startAttempts bounds StartCluster's retries on new ports.
const startAttempts = 3

func startCluster(n int, name string, o Options) (*Cluster, error) {
	root, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{root: root, opts: make([]*server.Options, n), servers: make([]*server.Server, n)}
	// A free loopback port each, released just before the server binds
	// it.
	var routes []*url.URL
	ports := make([][2]int, n)
	for i := range n {
		for j := range 2 {
			if ports[i][j], err = freePort(); err != nil {
				os.RemoveAll(root)
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
			NoLog:      !o.Log,
			SyncAlways: !o.NoSync,
			MaxPayload: MaxPayload,
		}
		if n > 1 {
			c.opts[i].Cluster = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[i][1]}
			c.opts[i].Routes = routes
		}
	}
	// Start them together: each waits for its peers to form the system
	// account's routes.
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- c.Start(i) }()
	}
	var startErr error
	for range n {
		if err := <-errs; err != nil && startErr == nil {
			startErr = err
		}
	}
	if startErr != nil {
		c.Shutdown()
		return nil, startErr
	}
	if n == 1 {
		return c, nil // standalone JetStream: no meta group to wait for
	}
	// Generous: three raft servers elect their first leader slowly when
	// -race tests of other packages hold both cores (30s was missed in CI).
	if err := c.WaitMetaLeader(2 * time.Minute); err != nil {
		c.Shutdown()
		return nil, err
	}
	// A leader is not enough for a replicated bucket: until it has heard
	// from every peer it refuses to place three replicas ("no suitable
	// peers for placement, peer offline"), which failed the first tests
	// of a loaded CI run.
	if err := c.waitPeersOnline(n, 2*time.Minute); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// waitPeersOnline waits until the meta leader sees n JetStream peers
// online, each with its stats received.
func (c *Cluster) waitPeersOnline(n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, s := range c.servers {
			if s != nil && s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) >= n {
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the meta leader did not see %d peers online within %v", n, d)
}

// Start starts (or restarts) server i on its ports.
func (c *Cluster) Start(i int) error {
	o := c.opts[i].Clone()
	s, err := server.NewServer(o)
	if err != nil {
		return err
	}
	if !o.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(time.Minute) {
		s.Shutdown()
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

// Stop kills server i without a graceful leave (lame duck skipped).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Shutdown stops every server and removes their storage.
func (c *Cluster) Shutdown() {
	for i := range c.servers {
		c.Stop(i)
	}
	os.RemoveAll(c.root)
}

// URLs is the client URL list, comma-separated (a --state value).
func (c *Cluster) URLs() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// WaitMetaLeader waits until a server is the JetStream meta leader.
func (c *Cluster) WaitMetaLeader(d time.Duration) error {
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

// WaitCurrent waits until server i has caught up with the JetStream meta
// leader after a restart.
func (c *Cluster) WaitCurrent(i int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c.mu.Lock()
		s := c.servers[i]
		c.mu.Unlock()
		if s != nil && s.JetStreamIsCurrent() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server %d not current with the meta leader within %v", i, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

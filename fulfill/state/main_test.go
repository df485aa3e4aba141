package state

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/natstest"
	"github.com/mewkit/fulfiller/internal/testenv"
)

// testCluster is one three-server JetStream cluster on loopback, shared by
// the package's tests (TestMain) to keep them fast. Tests that stop servers
// restart them before they end.
var testCluster *natstest.Cluster

func TestMain(m *testing.M) {
	testenv.RunAsNATSServer()
	testenv.QuickRaceExits() // the NATS servers it starts as processes
	// NoSync: these tests check the store's contract, not the servers'
	// fsync (TestClusterNodeLoss has a synced cluster of its own); a
	// server stopped here is a process stop, whose writes the page cache
	// keeps. Syncing every write made the package crawl on slow CI disks.
	c, err := natstest.StartCluster(3, "state-test", natstest.Options{Log: os.Getenv("STATE_TEST_NATS_LOG") != "", NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start NATS cluster:", err)
		os.Exit(1)
	}
	testCluster = c
	code := m.Run()
	c.Shutdown()
	os.Exit(code)
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
			m, err := ParseMode(testCluster.URLs())
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
		for _, kind := range []string{"seen", "pending", "outbox", "members", "meta", "grants", "pins"} {
			s.js.DeleteKeyValue(ctx, bucketName(kind, s.cfg.Space))
		}
	})
	return s
}

func clusterStore(t *testing.T, space, member string, mut ...func(*Config)) *Store {
	t.Helper()
	m, err := ParseMode(testCluster.URLs())
	if err != nil {
		t.Fatal(err)
	}
	return dropOnCleanup(t, openStore(t, Config{Mode: m, Space: space, Member: member, Replicas: 3}, mut...))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

package decisionlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/poll"
	"github.com/mewkit/fulfiller/internal/testenv"

	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
)

// disk is an injectable log file: it can be made to fail every write
// (as a full disk does), and it counts syncs; a sync may be held until
// the test lets it go.
type disk struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	full    bool
	syncs   int
	holdFor func() bool // while it returns true, Sync waits
}

func (d *disk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full {
		return 0, fmt.Errorf("write decisions.jsonl: %w", syscall.ENOSPC)
	}
	return d.buf.Write(p)
}

func (d *disk) Sync() error {
	for {
		d.mu.Lock()
		hold := d.holdFor
		d.mu.Unlock()
		if hold == nil || !hold() {
			break
		}
		time.Sleep(time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncs++
	return nil
}

func (d *disk) setFull(full bool) { d.mu.Lock(); d.full = full; d.mu.Unlock() }

func (d *disk) lines() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Split(strings.TrimSpace(d.buf.String()), "\n")
}

func (d *disk) syncCount() int { d.mu.Lock(); defer d.mu.Unlock(); return d.syncs }

func rejected(id string) fulfill.Event {
	return fulfill.Event{Time: time.Now(), Stage: fulfill.StageRejected, ProposalID: id, DecisionID: "d-" + id, Reason: "policy"}
}

// TestFullDiskFailsThenRecoversByItself: while writes fail, Record
// returns the error, Healthy reports it and every failed write is
// counted; once the disk has room again the log writes the records it
// held, in order, and is healthy — without a restart and without any new
// record to prompt it.
func TestFullDiskFailsThenRecoversByItself(t *testing.T) {
	d := &disk{}
	log := decisionlog.New(d, decisionlog.Options{FlushInterval: 10 * time.Millisecond})
	defer log.Close()

	if err := log.Record(rejected("a")); err != nil {
		t.Fatalf("Record on a working disk: %v", err)
	}
	d.setFull(true)
	err := log.Record(rejected("b"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Record on a full disk = %v, want ENOSPC", err)
	}
	if err := log.Healthy(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Healthy = %v, want ENOSPC", err)
	}
	log.Observe(rejected("c")) // held too, behind b
	if err := log.Record(rejected("d")); err == nil {
		t.Fatal("second Record on a full disk succeeded")
	}
	if n := log.WriteFailures(); n < 2 {
		t.Fatalf("WriteFailures = %d, want at least one per failed Record", n)
	}

	d.setFull(false)
	poll.Until(t, "the log to heal", func() bool { return log.Healthy() == nil })
	got := d.lines()
	var ids []string
	for _, l := range got {
		for _, id := range []string{"a", "b", "c", "d"} {
			if strings.Contains(l, `"proposal_id":"`+id+`"`) {
				ids = append(ids, id)
			}
		}
	}
	if strings.Join(ids, "") != "abcd" {
		t.Fatalf("records on disk: %v, want a b c d in order:\n%s", ids, strings.Join(got, "\n"))
	}
	if err := log.Record(rejected("e")); err != nil {
		t.Fatalf("Record after recovery: %v", err)
	}
	if err := log.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestBacklogBoundedWhileFailing: records beyond MaxBacklog are dropped
// and counted rather than held without bound while the disk is full.
func TestBacklogBoundedWhileFailing(t *testing.T) {
	d := &disk{full: true}
	log := decisionlog.New(d, decisionlog.Options{FlushInterval: time.Hour, MaxBacklog: 1024})
	defer log.Close()
	for i := range 50 {
		_ = log.Record(rejected(fmt.Sprint(i)))
	}
	if log.Dropped() == 0 {
		t.Fatal("nothing dropped with a 1 KiB backlog and 50 records on a full disk")
	}
}

// TestGroupCommitSharesSyncs: N records recorded at once with
// SyncAlways are all on disk when their Record returns, with fewer than N
// fsyncs. The first sync is held until all N have been appended, so the
// rest must share the next one.
func TestGroupCommitSharesSyncs(t *testing.T) {
	const n = 32
	d := &disk{}
	log := decisionlog.New(d, decisionlog.Options{FlushInterval: time.Hour})
	defer log.Close()
	d.holdFor = func() bool { return log.Records() < n }
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- log.Record(rejected(fmt.Sprint(i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
	if got := len(d.lines()); got != n {
		t.Fatalf("%d lines on disk when every Record had returned, want %d", got, n)
	}
	if s := d.syncCount(); s >= n || s < 1 {
		t.Fatalf("%d fsyncs for %d concurrent records, want at least 1 and fewer than %d", s, n, n)
	}
}

// TestIntervalSyncDoesNotWait: with SyncInterval, Record returns before
// the record is written; Flush writes it.
func TestIntervalSyncDoesNotWait(t *testing.T) {
	d := &disk{}
	log := decisionlog.New(d, decisionlog.Options{Sync: decisionlog.SyncInterval, FlushInterval: time.Hour})
	defer log.Close()
	if err := log.Record(rejected("a")); err != nil {
		t.Fatal(err)
	}
	if s := d.syncCount(); s != 0 {
		t.Fatalf("%d syncs before the interval", s)
	}
	if err := log.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := d.lines(); len(got) != 1 || d.syncCount() != 1 {
		t.Fatalf("after Flush: %d syncs, lines %q", d.syncCount(), got)
	}
	d.setFull(true)
	if err := log.Record(rejected("b")); err != nil {
		t.Fatalf("Record before anything failed: %v", err)
	}
	if err := log.Flush(); err == nil {
		t.Fatal("Flush on a full disk succeeded")
	}
	if err := log.Record(rejected("c")); err == nil {
		t.Fatal("Record with SyncInterval on a failing log returned nil")
	}
}

// TestOpenTightensExistingFile: a log file that others may read is made
// 0600 by Open, before anything is written to it.
func TestOpenTightensExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // despite the umask
		t.Fatal(err)
	}
	log, err := decisionlog.Open(path, decisionlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v after Open, want 0600", fi.Mode().Perm())
	}
}

// TestOpenDevFullFailsClosed: through the real file path, a device that
// is always full (/dev/full) makes Record fail and the log unhealthy.
func TestOpenDevFullFailsClosed(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		testenv.Missing(t, "no /dev/full here")
	}
	log, err := decisionlog.Open("/dev/full", decisionlog.Options{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Record(rejected("a")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Record to /dev/full = %v, want ENOSPC", err)
	}
	if log.Healthy() == nil || log.WriteFailures() == 0 {
		t.Fatalf("Healthy %v, failures %d", log.Healthy(), log.WriteFailures())
	}
	if err := log.Close(); err == nil {
		t.Fatal("Close of a log whose records never reached the disk returned nil")
	}
}

// BenchmarkRecordParallel records from many goroutines with SyncAlways on
// a real file and reports how many records each fsync carried.
func BenchmarkRecordParallel(b *testing.B) {
	path := filepath.Join(b.TempDir(), "decisions.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	cs := &countingSync{f: f}
	log := decisionlog.New(cs, decisionlog.Options{})
	defer log.Close()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := log.Record(rejected("p")); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.syncs > 0 {
		b.ReportMetric(float64(b.N)/float64(cs.syncs), "records/fsync")
	}
}

// countingSync is a real file whose syncs are counted.
type countingSync struct {
	f     *os.File
	mu    sync.Mutex
	syncs int
}

func (c *countingSync) Write(p []byte) (int, error) { return c.f.Write(p) }
func (c *countingSync) Sync() error {
	c.mu.Lock()
	c.syncs++
	c.mu.Unlock()
	return c.f.Sync()
}

// Package decisionlog writes fulfiller's decision log: one JSON object per
// line for every policy decision and every change in a proposal's outcome,
// modelled on Open Policy Agent's decision logs so that the same tooling
// (jq, log shippers, OPA-aware dashboards) can read it.
//
// The log is an audit trail, and like Vault's audit devices it fails
// closed. Record (fulfill.Recorder) returns only when its record is on
// disk — written and fsynced — or with the error that kept it off, and the
// Fulfiller neither fulfils nor escalates without that record. One
// committer goroutine writes and syncs whatever has been appended since
// its last round (group commit), so concurrent records share one fsync.
// Observe appends without waiting; its records reach the disk with the
// next commit, in order. Records that cannot be written stay in memory
// (up to Options.MaxBacklog) and are written when the file works again:
// the committer retries every FlushInterval, so the log heals by itself,
// and Healthy says when it is failing (for /readyz). With SyncInterval,
// records are written and synced every FlushInterval instead, and Record
// only reports whether the log is failing. Reopen starts a new file at the
// same path, for logrotate (SIGHUP).
package decisionlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/fulfill/decisionlog/logrecord"
	"github.com/mewkit/fulfiller/internal/printable"
)

// SyncMode says when records are forced to disk (--decision-log-sync).
type SyncMode string

// Sync modes.
const (
	// SyncAlways: Record returns once its record is written and fsynced;
	// concurrent records share one fsync (group commit). "The answer went
	// out" implies "its record is on disk".
	SyncAlways SyncMode = "always"
	// SyncInterval: records are written and fsynced every FlushInterval
	// (and when BufferSize is buffered). A crash loses at most that
	// interval, and a failing disk stops fulfilments within it.
	SyncInterval SyncMode = "interval"
)

// ParseSyncMode reads a --decision-log-sync value.
func ParseSyncMode(s string) (SyncMode, error) {
	switch m := SyncMode(s); m {
	case SyncAlways, SyncInterval:
		return m, nil
	}
	return "", fmt.Errorf("sync mode %q: want always or interval", s)
}

// Options tune a Logger.
type Options struct {
	// Mask lists input paths to erase before logging, dotted from the
	// input root: "params.arguments.password". Arguments appear three
	// times in the input (params.arguments, tool.arguments and the raw
	// proposal's payload.params.arguments); a mask of any one erases all.
	Mask []string
	// Keyed reports whether an approver's answers must be signed; their
	// accepted answers are logged with signature_verified true, and
	// forgeries with false. Nil: no approver is keyed. It is asked as
	// each line is written, so it may follow keys that change (run's
	// follows the reloaded --approver-keys file); it must be safe to call
	// from any goroutine.
	Keyed func(approver string) bool
	// Sync says when records are forced to disk [SyncAlways].
	Sync SyncMode
	// FlushInterval is how often SyncInterval writes, and how often a
	// failing log tries again [1s].
	FlushInterval time.Duration
	// BufferSize is how much SyncInterval buffers before it writes
	// early [64KiB].
	BufferSize int
	// MaxBacklog bounds the records held in memory: while the file is
	// slow, appends wait for room (backpressure); while it fails, records
	// beyond the bound are dropped and counted [64MiB].
	MaxBacklog int
	Logger     *slog.Logger // [discard]
}

// ErrClosed is returned by Record after Close.
var ErrClosed = errors.New("decision log: closed")

// Logger writes the decision log. It implements fulfill.Recorder (and so
// fulfill.Observer); pass ObserveApproval as elicit.Config.Observer for
// the approval lines.
type Logger struct {
	opts  Options
	masks []maskPath
	path  string // "" when writing to stdout or a caller's io.Writer
	log   *slog.Logger

	mu         sync.Mutex
	committed  *sync.Cond // broadcast when a commit ends
	room       *sync.Cond // broadcast when the backlog shrinks or starts failing
	w          io.Writer
	file       *os.File     // nil for stdout or a caller's writer
	sync       func() error // nil: nothing to sync (stdout, a pipe, a device)
	buf        []byte       // records appended and not yet written
	seq        uint64       // records appended so far
	done       uint64       // records written and synced
	failedUpto uint64       // the last failed commit covered records up to here
	unsynced   bool         // written, but the sync failed: sync again
	committing bool
	failing    error // non-nil while the last commit failed
	closed     bool
	failures   uint64
	dropped    uint64

	kick      chan struct{}
	stop      chan struct{}
	committer chan struct{} // closed when the committer has stopped
}

// Open starts a decision log at path; "-" is stdout. The file is appended
// to and created 0600 when missing, and an existing file is tightened to
// 0600: inputs can hold secrets the masks missed.
func Open(path string, opts Options) (*Logger, error) {
	if path == "-" {
		l := newLogger(os.Stdout, nil, opts)
		return l, nil
	}
	f, syncFn, err := openFile(path)
	if err != nil {
		return nil, err
	}
	l := newLogger(f, syncFn, opts)
	l.path, l.file = path, f
	return l, nil
}

// New writes the decision log to w. Close flushes but does not close w.
// When w has a Sync method (an *os.File for a regular file, or a test's
// writer), commits call it.
func New(w io.Writer, opts Options) *Logger {
	var syncFn func() error
	if s, ok := w.(interface{ Sync() error }); ok {
		syncFn = s.Sync
		if f, ok := w.(*os.File); ok && !isRegular(f) {
			syncFn = nil // stdout on a pipe or terminal: fsync fails there
		}
	}
	return newLogger(w, syncFn, opts)
}

func newLogger(w io.Writer, syncFn func() error, opts Options) *Logger {
	if opts.Sync == "" {
		opts.Sync = SyncAlways
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = 64 << 10
	}
	if opts.MaxBacklog <= 0 {
		opts.MaxBacklog = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Logger{
		opts:      opts,
		masks:     compileMasks(opts.Mask),
		log:       opts.Logger,
		w:         w,
		sync:      syncFn,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		committer: make(chan struct{}),
	}
	l.committed = sync.NewCond(&l.mu)
	l.room = sync.NewCond(&l.mu)
	go l.commitLoop()
	return l
}

// openFile opens path for appending, 0600, and says how to sync it.
func openFile(path string) (*os.File, func() error, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("decision log: %w", err)
	}
	if !isRegular(f) {
		// A device or a pipe (/dev/stderr, a FIFO to a shipper): neither
		// its mode nor fsync are ours to manage.
		return f, nil, nil
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("decision log: %s is readable by others (%v) and cannot be tightened to 0600: %w", path, fi.Mode().Perm(), err)
		}
	}
	return f, f.Sync, nil
}

func isRegular(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// commitLoop is the committer: it commits when kicked (SyncAlways: every
// append) and every FlushInterval, which is also how a failing log tries
// again without traffic.
func (l *Logger) commitLoop() {
	defer close(l.committer)
	t := time.NewTicker(l.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		case <-t.C:
		}
		_ = l.commit()
	}
}

func (l *Logger) kickCommitter() {
	select {
	case l.kick <- struct{}{}:
	default: // a commit is already due; it will take this record too
	}
}

// commit writes and syncs every record appended so far, one at a time
// with other commits. Bytes that could not be written stay at the head of
// the buffer for the next try.
func (l *Logger) commit() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.committing {
		l.committed.Wait()
	}
	if len(l.buf) == 0 && !l.unsynced {
		// Nothing is waiting to be written (a reopened file took the
		// backlog, or there never was one): nothing is failing either.
		l.done = l.seq
		if l.failing != nil {
			l.log.Info("decision log writable again", "path", l.path, "failures", l.failures)
			l.failing = nil
		}
		return nil
	}
	data, upto, w, syncFn := l.buf, l.seq, l.w, l.sync
	l.buf = nil
	l.committing = true
	l.mu.Unlock()

	n, err := w.Write(data)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err == nil && syncFn != nil {
		err = syncFn()
	}

	l.mu.Lock()
	l.committing = false
	if n < len(data) {
		l.buf = append(slices.Clip(data[n:]), l.buf...)
	}
	if err != nil {
		l.failures++
		l.failedUpto = upto
		l.unsynced = n == len(data) // written, not synced: sync again
		if l.failing == nil {
			l.log.Error("decision log cannot be written: fulfilments and escalations stop until it can", "path", l.path, "err", err)
		}
		l.failing = err
	} else {
		l.unsynced = false
		l.done = upto
		if l.failing != nil {
			l.log.Info("decision log writable again", "path", l.path, "failures", l.failures)
		}
		l.failing = nil
	}
	l.committed.Broadcast()
	l.room.Broadcast()
	return err
}

// add appends a formatted line and returns its sequence number, or 0 when
// it was not appended (closed, or dropped while failing).
func (l *Logger) add(line []byte, r *logrecord.Record) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && l.failing == nil && len(l.buf) > 0 && len(l.buf)+len(line) > l.opts.MaxBacklog {
		l.kickCommitter()
		l.room.Wait() // backpressure: a slow disk slows the fulfiller down
	}
	switch {
	case l.closed:
		l.log.Error("decision log: record after Close dropped", "proposal", r.ProposalID, "stage", r.Stage)
		return 0, ErrClosed
	case l.failing != nil && len(l.buf)+len(line) > l.opts.MaxBacklog:
		l.dropped++
		l.log.Error("decision log: record dropped, the backlog of unwritten records is full", "proposal", r.ProposalID, "stage", r.Stage, "dropped", l.dropped)
		return 0, fmt.Errorf("decision log: record dropped (backlog full): %w", l.failing)
	}
	l.buf = append(l.buf, line...)
	l.seq++
	if l.opts.Sync == SyncAlways || len(l.buf) >= l.opts.BufferSize {
		l.kickCommitter()
	}
	return l.seq, nil
}

// wait returns once record seq is on disk, or with the error of the
// commit that failed to put it there.
func (l *Logger) wait(seq uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		switch {
		case l.done >= seq:
			return nil
		case l.failedUpto >= seq:
			return fmt.Errorf("decision log: %w", l.failing)
		case l.closed && !l.committing:
			return ErrClosed
		}
		l.committed.Wait()
	}
}

// Records is how many records have been appended so far.
func (l *Logger) Records() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Healthy is nil while records can be written, and the last write error
// while they cannot (/readyz).
func (l *Logger) Healthy() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing != nil {
		return fmt.Errorf("decision log: %w", l.failing)
	}
	return nil
}

// WriteFailures is how many writes (or syncs) of the log have failed.
func (l *Logger) WriteFailures() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures
}

// Dropped is how many records were lost because the file failed for so
// long that the backlog filled up.
func (l *Logger) Dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Flush writes and syncs every record appended so far.
func (l *Logger) Flush() error {
	if err := l.commit(); err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// Reopen commits what is buffered, closes the file and opens path again,
// so that a rotated file (renamed by logrotate) is let go and a new one
// started. Records that cannot be written to the old file go to the new
// one. It does nothing for stdout or a caller's writer.
func (l *Logger) Reopen() error {
	_ = l.commit()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.committing {
		l.committed.Wait()
	}
	if l.closed || l.file == nil {
		return nil
	}
	f, syncFn, err := openFile(l.path)
	if err != nil {
		// Keep writing to the old file rather than losing records.
		return err
	}
	if err := l.file.Close(); err != nil {
		l.log.Warn("decision log: closing the rotated file", "path", l.path, "err", err)
	}
	l.file, l.w, l.sync = f, f, syncFn
	l.unsynced = false // the old file's sync no longer matters; the backlog goes to the new one
	return nil
}

// Close writes every record and closes the file. It returns an error when
// records were lost: unwritten at the end, or dropped on the way (a
// failure the log recovered from without losing anything is not one).
// Records after Close are refused; close the log only after fulfill.Run
// has returned.
func (l *Logger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	close(l.stop)
	<-l.committer
	err := l.commit()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.dropped > 0 {
		err = fmt.Errorf("%d records dropped while the file could not be written", l.dropped)
	}
	if len(l.buf) > 0 {
		l.log.Error("decision log: records never written", "path", l.path, "bytes", len(l.buf))
	}
	if l.file != nil {
		if cerr := l.file.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	l.committed.Broadcast()
	if err != nil {
		return fmt.Errorf("decision log: %w", err)
	}
	return nil
}

// format encodes one record as a line.
func (l *Logger) format(r *logrecord.Record) []byte {
	if r.DecisionID == "" {
		r.DecisionID = fulfill.NewDecisionID() // a line with nothing to join: its own
	}
	line, err := json.Marshal(r)
	if err != nil {
		// A policy result that cannot be encoded; keep the line without it.
		l.log.Error("decision log: record not encodable", "proposal", r.ProposalID, "err", err)
		r.Result, r.Input, r.Error = nil, nil, "record not encodable: "+err.Error()
		line, _ = json.Marshal(r)
	}
	// Text others wrote keeps its bidirectional and invisible characters
	// as \u escapes: the same text to a JSON reader, visible in less or
	// grep (internal/printable).
	return append(printable.JSON(line), '\n')
}

// write appends one record without waiting for it to reach the disk.
func (l *Logger) write(r *logrecord.Record) {
	_, _ = l.add(l.format(r), r)
}

// Record implements fulfill.Recorder: it writes the event's line and, with
// SyncAlways, returns once it is on disk. With SyncInterval it returns at
// once, with the error of the last write if that failed. An event the log
// does not keep returns nil.
func (l *Logger) Record(e fulfill.Event) error {
	r := l.fromEvent(e)
	if r == nil {
		return nil
	}
	seq, err := l.add(l.format(r), r)
	if err != nil {
		return err
	}
	if l.opts.Sync == SyncInterval {
		return l.Healthy()
	}
	return l.wait(seq)
}

// Observe implements fulfill.Observer: it writes a line for each decision
// and each outcome change, without waiting for the disk. Received and
// queued steps are progress, not outcomes, and are not logged (fulfilling
// is: the fulfilment request is the proposer's answer under docs/design.md rule 2).
func (l *Logger) Observe(e fulfill.Event) {
	if r := l.fromEvent(e); r != nil {
		l.write(r)
	}
}

// fromEvent makes the record of e, or nil when e is not logged.
func (l *Logger) fromEvent(e fulfill.Event) *logrecord.Record {
	r := &logrecord.Record{
		DecisionID: e.DecisionID, Revision: revision(e.Revision),
		Timestamp: e.Time.UTC(), Stage: string(e.Stage), ProposalID: e.ProposalID,
		Proposer: e.Proposer, Method: e.Method, Tool: e.Tool, Target: e.Target, FrontEnd: e.FrontEnd,
	}
	if f := e.LogFields; f != nil {
		// What the front end named of the call at intake, kept with its
		// record (an MCP call's client, server, rpc_id): on every line.
		r.Client, r.Server, r.RPCID = f.Client, f.Server, f.RPCID
	}
	switch e.Stage {
	case fulfill.StageDecided:
		r.Type = logrecord.TypeDecision
		r.LatencyNS = e.Latency.Nanoseconds()
		if e.Decision != nil {
			r.Result = e.Decision
			if r.Revision == nil {
				r.Revision = revision(e.Decision.Revision)
			}
			if e.Decision.Err != nil {
				r.Error = e.Decision.Err.Error()
			}
			if e.Decision.Retried {
				r.PolicyTimeout = "retried"
				if e.Decision.Err != nil && e.Decision.Reason == decision.ReasonBusy {
					r.PolicyTimeout = "busy"
				}
			}
		}
		r.GrantID = e.GrantID
		if e.Input != nil {
			r.Reevaluated = e.Input.Approval != nil
			r.Input, r.Erased = l.maskedInput(e.Input)
		}
	case fulfill.StageEscalated:
		r.Type, r.By, r.Message = logrecord.TypeOutcome, e.By, e.Message
	case fulfill.StageGranted:
		r.Type, r.By, r.Message, r.GrantID = logrecord.TypeGrant, e.By, e.Message, e.GrantID
	case fulfill.StageApproved, fulfill.StageFulfilling, fulfill.StageWithdrawn, fulfill.StageSuperseded:
		r.Type, r.By, r.Reason, r.Message = logrecord.TypeOutcome, e.By, e.Reason, e.Message
	case fulfill.StageTask:
		r.Type, r.Task, r.Message = logrecord.TypeOutcome, taskOf(e.Task), e.Message
	case fulfill.StageFulfilled:
		r.Type, r.By, r.Task = logrecord.TypeOutcome, e.By, taskOf(e.Task)
		r.LatencyNS = e.Latency.Nanoseconds()
		r.Status, r.RPCError = fulfill.FulfilledStatus(e.Result, e.RPCError), e.RPCError
	case fulfill.StageRejected:
		r.Type, r.Reason, r.Message = logrecord.TypeOutcome, e.Reason, e.Message
		if e.Reason == decision.ReasonTimeout {
			r.Status = "timeout"
		}
	case fulfill.StageUndelivered:
		r.Type, r.Reason, r.Message = logrecord.TypeOutcome, e.Reason, e.Message
	case fulfill.StageIgnored:
		r.Type, r.Reason, r.Message = logrecord.TypeIgnored, e.Reason, e.Message
	case fulfill.StageImpersonated:
		if e.ProposalID == "" {
			return nil // counted in the metrics; a line each would let a flood grow the log
		}
		r.Type, r.Reason, r.Message = logrecord.TypeIgnored, "impersonation", "an "+e.Envelope+" in our name that we did not send: envelope "+e.Message
	case fulfill.StageShadow:
		if e.Shadow == nil || e.Shadow.Dropped {
			return nil // counted in the metrics; a line each would let a flood grow the log
		}
		d := e.Shadow.Decision
		r.Type = logrecord.TypeShadow
		r.Shadow = &logrecord.Shadow{Revision: d.Revision, Live: string(e.Shadow.Live), Result: &d,
			Agrees: e.Shadow.Agrees, LatencyNS: e.Shadow.Latency.Nanoseconds()}
		if d.Err != nil {
			r.Shadow.Error = d.Err.Error()
		}
	default:
		return nil
	}
	if e.Stage == fulfill.StageSuperseded {
		r.KnownFulfiller = &e.KnownFulfiller
	}
	return r
}

// revision is a record's revision: null when no policy decided.
func revision(rev string) *string {
	if rev == "" {
		return nil
	}
	return &rev
}

// ObserveApproval takes elicit's events (elicit.Config.Observer, or the
// core's steps through elicit.EventOf): a line for each human answer
// that counted, each forged one, and each delegation (whose answer then
// counts is part of the record). A line names the call as its
// proposal's front end does (Event.FrontEnd, Event.Log: an MCP call's
// client, server and rpc_id).
func (l *Logger) ObserveApproval(e elicit.Event) {
	r := &logrecord.Record{Type: logrecord.TypeApproval, Stage: string(e.Kind), Timestamp: e.Time.UTC(), ProposalID: e.ProposalID,
		DecisionID: e.DecisionID, Revision: revision(e.Revision), Approver: e.Approver, Action: e.Action, Reason: e.Reason}
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now().UTC()
	}
	r.FrontEnd = e.FrontEnd
	if f := e.Log; f != nil {
		r.Client, r.Server, r.RPCID = f.Client, f.Server, f.RPCID
	}
	keyed := l.opts.Keyed != nil && l.opts.Keyed(e.Approver)
	switch e.Kind {
	case elicit.EventAnswered:
		approve := e.Approve
		r.Approve = &approve
		if keyed && e.Action != "" {
			v := true // elicit counts a keyed approver's answer only after Verify
			r.SignatureVerified = &v
		}
	case elicit.EventForgery:
		v := false
		r.SignatureVerified = &v
		r.Message = "answer from " + e.From + " ignored"
	case elicit.EventDelegated:
		r.To = e.To
		r.Message = e.Approver + " handed their request on to " + e.To
	default:
		return
	}
	l.write(r)
}

// taskOf is the task as the log writes it (nil for none).
func taskOf(t *fulfill.TaskInfo) *logrecord.Task {
	if t == nil {
		return nil
	}
	return &logrecord.Task{ID: t.ID, Spec: t.Spec, Status: t.Status, Created: t.Created, Deadline: t.Deadline}
}

// Package decisionlog writes fulfiller's decision log: one JSON object per
// line for every policy decision and every change in a proposal's outcome,
// modelled on Open Policy Agent's decision logs so that the same tooling
// (jq, log shippers, OPA-aware dashboards) can read it.
//
// The log is an audit trail, so it never drops a record: Observe formats
// the record and writes it into a buffer under a lock, and when the buffer
// is full the write goes to the file at once — a slow disk slows the
// fulfiller down (backpressure) instead of losing lines. A background
// flusher empties the buffer every FlushInterval, and Close flushes the
// rest. Reopen starts a new file at the same path, for logrotate (SIGHUP).
package decisionlog

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/policies"
)

// Record types, in the "type" field of each line.
const (
	TypeDecision = "decision" // the policy answered (result, input, latency)
	TypeOutcome  = "outcome"  // the proposal moved towards (or reached) its end
	TypeApproval = "approval" // one human answered an escalation
	TypeIgnored  = "ignored"  // a proposal frame was deliberately left unanswered
)

// Record is one line of the decision log. Fields absent for a record type
// are left out. decision_id is unique per line (as in OPA); proposal_id
// ties the lines of one proposal together and is always present.
type Record struct {
	DecisionID string    `json:"decision_id"`
	Timestamp  time.Time `json:"timestamp"`
	Type       string    `json:"type"`
	Stage      string    `json:"stage"`
	ProposalID string    `json:"proposal_id"`
	Proposer   string    `json:"proposer,omitempty"`
	Method     string    `json:"method,omitempty"`
	Tool       string    `json:"tool,omitempty"`
	Target     string    `json:"target,omitempty"`

	// Decision records.
	Input       json.RawMessage    `json:"input,omitempty"`
	Erased      []string           `json:"erased,omitempty"` // masked input paths, as in OPA ("/input/params/arguments/password")
	Result      *policies.Decision `json:"result,omitempty"`
	Revision    string             `json:"revision,omitempty"`
	Error       string             `json:"error,omitempty"`       // why the decision failed closed
	Reevaluated bool               `json:"reevaluated,omitempty"` // asked again after an approver edited the call
	LatencyNS   int64              `json:"latency_ns,omitempty"`

	// Outcome records.
	Status   string          `json:"status,omitempty"` // fulfilled: ok or error; rejected with reason timeout: timeout
	Reason   string          `json:"reason,omitempty"` // rejected: the wire reason; withdrawn: the proposer's; ignored: why
	Message  string          `json:"message,omitempty"`
	By       []string        `json:"by,omitempty"`        // approved/fulfilled: approvers; superseded: who answered instead; escalated: who is asked
	RPCError json.RawMessage `json:"rpc_error,omitempty"` // fulfilled with status error: the JSON-RPC error object
	// KnownFulfiller (superseded): whether By is a fellow fulfiller
	// (--peer-fulfillers) or another participant that ended the proposal.
	KnownFulfiller *bool `json:"known_fulfiller,omitempty"`

	// Approval records.
	Approver          string `json:"approver,omitempty"`
	Action            string `json:"action,omitempty"`             // accept, decline or cancel
	Approve           *bool  `json:"approve,omitempty"`            // accept with approve true
	SignatureVerified *bool  `json:"signature_verified,omitempty"` // nil: the approver has no key, the gateway's word was taken
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
	// forgeries with false. Nil: no approver is keyed.
	Keyed func(approver string) bool
	// FlushInterval bounds how long a record may sit in the buffer [1s].
	FlushInterval time.Duration
	// BufferSize is the write buffer [64KiB].
	BufferSize int
	Logger     *slog.Logger // [discard]
}

// Logger writes the decision log. It implements fulfill.Observer; pass
// ObserveApproval as elicit.Config.Observer for the approval lines.
type Logger struct {
	opts  Options
	masks []maskPath
	path  string // "" when writing to a caller's io.Writer
	log   *slog.Logger

	mu     sync.Mutex
	w      *bufio.Writer
	file   *os.File // nil for stdout or a caller's writer
	closed bool
	n      uint64
	err    error // first write error, reported by Close

	stop chan struct{}
	done chan struct{}
}

// Open starts a decision log at path; "-" is stdout. The file is appended
// to and created 0600 when missing: inputs can hold secrets the masks
// missed.
func Open(path string, opts Options) (*Logger, error) {
	if path == "-" {
		return New(os.Stdout, opts), nil
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	l := newLogger(f, opts)
	l.path, l.file = path, f
	return l, nil
}

// New writes the decision log to w. Close flushes but does not close w.
func New(w io.Writer, opts Options) *Logger { return newLogger(w, opts) }

func newLogger(w io.Writer, opts Options) *Logger {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = 64 << 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Logger{
		opts:  opts,
		masks: compileMasks(opts.Mask),
		log:   opts.Logger,
		w:     bufio.NewWriterSize(w, opts.BufferSize),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go l.flusher()
	return l
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	return f, nil
}

func (l *Logger) flusher() {
	defer close(l.done)
	t := time.NewTicker(l.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			if !l.closed {
				l.noteErr(l.w.Flush())
			}
			l.mu.Unlock()
		}
	}
}

// noteErr keeps the first write error and logs each; called with l.mu held.
func (l *Logger) noteErr(err error) {
	if err == nil {
		return
	}
	l.log.Error("decision log write failed", "path", l.path, "err", err)
	if l.err == nil {
		l.err = err
	}
	if l.file != nil {
		// bufio.Writer keeps a write error forever: start a fresh buffer
		// so that the next flush tries again instead of failing at once.
		l.w = bufio.NewWriterSize(l.file, l.opts.BufferSize)
	}
}

// Records is how many records have been written (into the buffer) so far.
func (l *Logger) Records() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Flush writes the buffered records out.
func (l *Logger) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	err := l.w.Flush()
	l.noteErr(err)
	return err
}

// Reopen flushes and closes the file and opens path again, so that a
// rotated file (renamed by logrotate) is let go and a new one started. It
// does nothing for stdout or a caller's writer.
func (l *Logger) Reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.file == nil {
		return nil
	}
	l.noteErr(l.w.Flush())
	f, err := openFile(l.path)
	if err != nil {
		// Keep writing to the old file rather than losing records.
		return err
	}
	if err := l.file.Close(); err != nil {
		l.log.Warn("decision log: closing the rotated file", "path", l.path, "err", err)
	}
	l.file = f
	l.w = bufio.NewWriterSize(f, l.opts.BufferSize)
	return nil
}

// Close flushes every record and closes the file. It returns the first
// write error seen since Open. Records observed after Close are dropped
// with an error log; Close the log only after fulfill.Run has returned.
func (l *Logger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.noteErr(l.w.Flush())
	if l.file != nil {
		l.noteErr(l.file.Close())
	}
	err := l.err
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	return err
}

// write appends one record as a line.
func (l *Logger) write(r *Record) {
	r.DecisionID = newID()
	line, err := json.Marshal(r)
	if err != nil {
		// A policy result that cannot be encoded; keep the line without it.
		l.log.Error("decision log: record not encodable", "proposal", r.ProposalID, "err", err)
		r.Result, r.Input, r.Error = nil, nil, "record not encodable: "+err.Error()
		line, _ = json.Marshal(r)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.log.Error("decision log: record after Close dropped", "proposal", r.ProposalID, "stage", r.Stage)
		return
	}
	_, err = l.w.Write(line)
	l.noteErr(err)
	l.n++
}

// Observe implements fulfill.Observer: it writes a line for each decision
// and each outcome change. Received, queued and fulfilling steps are
// progress, not outcomes, and are not logged (fulfilling is: the
// fulfilment request is the proposer's answer under DESIGN rule 2).
func (l *Logger) Observe(e fulfill.Event) {
	r := &Record{
		Timestamp: e.Time.UTC(), Stage: string(e.Stage), ProposalID: e.ProposalID,
		Proposer: e.Proposer, Method: e.Method, Tool: e.Tool, Target: e.Target,
	}
	switch e.Stage {
	case fulfill.StageDecided:
		r.Type = TypeDecision
		r.LatencyNS = e.Latency.Nanoseconds()
		if e.Decision != nil {
			r.Result = e.Decision
			r.Revision = e.Decision.Revision
			if e.Decision.Err != nil {
				r.Error = e.Decision.Err.Error()
			}
		}
		if e.Input != nil {
			r.Reevaluated = e.Input.Approval != nil
			r.Input, r.Erased = l.maskedInput(e.Input)
		}
	case fulfill.StageEscalated:
		r.Type, r.By, r.Message = TypeOutcome, e.By, e.Message
	case fulfill.StageApproved, fulfill.StageFulfilling, fulfill.StageWithdrawn, fulfill.StageSuperseded:
		r.Type, r.By, r.Reason, r.Message = TypeOutcome, e.By, e.Reason, e.Message
	case fulfill.StageFulfilled:
		r.Type, r.By = TypeOutcome, e.By
		r.LatencyNS = e.Latency.Nanoseconds()
		r.Status = "ok"
		if len(e.RPCError) > 0 {
			r.Status, r.RPCError = "error", e.RPCError
		}
	case fulfill.StageRejected:
		r.Type, r.Reason, r.Message = TypeOutcome, e.Reason, e.Message
		if e.Reason == policies.ReasonTimeout {
			r.Status = "timeout"
		}
	case fulfill.StageIgnored:
		r.Type, r.Reason, r.Message = TypeIgnored, e.Reason, e.Message
	default:
		return
	}
	if e.Stage == fulfill.StageSuperseded {
		r.KnownFulfiller = &e.KnownFulfiller
	}
	l.write(r)
}

// ObserveApproval takes elicit's events (elicit.Config.Observer): a line
// for each human answer that counted and each forged one.
func (l *Logger) ObserveApproval(e elicit.Event) {
	r := &Record{Type: TypeApproval, Stage: string(e.Kind), Timestamp: e.Time.UTC(), ProposalID: e.ProposalID, Approver: e.Approver, Action: e.Action, Reason: e.Reason}
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now().UTC()
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
	default:
		return
	}
	l.write(r)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // UUID v4 layout, as OPA's decision ids
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

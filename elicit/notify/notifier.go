package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/elicit"
)

// Target delivers events to one destination.
type Target interface {
	// Kind is the metrics label: webhook, slack or smtp.
	Kind() string
	// String names the destination for logs without its secrets
	// (scheme and host: a webhook's path or a Slack URL can be the key).
	String() string
	// Send delivers ev once. ctx bounds the attempt. An error wrapping
	// ErrPermanent is not retried.
	Send(ctx context.Context, ev Event) error
}

// ErrPermanent marks a failure that retrying cannot fix (a receiver
// that refuses the request as malformed or unauthorised).
var ErrPermanent = errors.New("permanent failure")

// Metrics counts deliveries; *ops.Metrics provides it.
type Metrics interface {
	// Notification counts a job's end: result is sent, failed (its
	// attempts ran out or it failed for good) or dropped (the queue was
	// full, or run stopped before it went out).
	Notification(targetKind, result string)
	// NotificationRetry counts an attempt after the first.
	NotificationRetry(targetKind string)
}

// Results of Metrics.Notification.
const (
	ResultSent    = "sent"
	ResultFailed  = "failed"
	ResultDropped = "dropped"
)

// Config tunes a Notifier. Zero values take the defaults in brackets.
type Config struct {
	Targets []Target
	// Space and InboxURL go into every event (--space, --inbox-url).
	Space    string
	InboxURL string
	// QueueSize bounds the jobs waiting per target; more drop the
	// oldest [256].
	QueueSize int
	// Workers deliver each target's jobs [1: in order, so that a
	// receiver hears prompt.opened before prompt.ended].
	Workers int
	// Attempts per job, the first included [5].
	Attempts int
	// Backoff is the wait before the first retry, doubled (with jitter)
	// before each next one up to MaxBackoff [1s, 1m].
	Backoff, MaxBackoff time.Duration
	// Timeout bounds one attempt [10s].
	Timeout time.Duration
	// Drain is how long the queued jobs may still go out once Run's
	// context ends (prompt.ended of the proposals answered at shutdown);
	// what is left then is dropped [5s].
	Drain   time.Duration
	Metrics Metrics      // [none]
	Logger  *slog.Logger // [discard]
}

// Notifier queues and delivers events; see the package doc.
type Notifier struct {
	cfg    Config
	log    *slog.Logger
	queues []*queue
	closed atomic.Bool
}

// queue is one target's jobs.
type queue struct {
	target Target
	jobs   chan Event
}

// New makes a Notifier; Run delivers.
func New(cfg Config) *Notifier {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 5
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: cfg, log: cfg.Logger}
	for _, t := range cfg.Targets {
		n.queues = append(n.queues, &queue{target: t, jobs: make(chan Event, cfg.QueueSize)})
	}
	return n
}

// Observe is an escalation observer (elicit.Config.Observer): it queues
// prompt.opened and prompt.ended for every target and returns at once.
func (n *Notifier) Observe(e elicit.Event) {
	ev, ok := eventOf(e, n.cfg.Space, n.cfg.InboxURL)
	if !ok {
		return
	}
	if n.closed.Load() {
		for _, q := range n.queues {
			n.count(q.target, ResultDropped)
		}
		return
	}
	for _, q := range n.queues {
		if w, ok := q.target.(wanter); ok && !w.Wants(ev) {
			continue
		}
		n.enqueue(q, ev)
	}
}

// enqueue adds ev to q without blocking: when q is full its oldest job
// makes room (a newer event about the same prompt says more).
func (n *Notifier) enqueue(q *queue, ev Event) {
	for {
		select {
		case q.jobs <- ev:
			return
		default:
		}
		select {
		case old := <-q.jobs:
			n.count(q.target, ResultDropped)
			n.log.Warn("notification dropped: the queue is full", "target", q.target.String(), "type", old.Type, "proposal", old.Proposal)
		default:
		}
	}
}

// Run delivers until ctx ends, then for at most Config.Drain what is
// still queued; it returns when every worker has stopped. Events observed
// after ctx ended are dropped (counted).
func (n *Notifier) Run(ctx context.Context) error {
	drainCtx, stopDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDrain()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(n.cfg.Drain, stopDrain)
		context.AfterFunc(drainCtx, func() { t.Stop() })
	})
	defer stop()
	var wg sync.WaitGroup
	for _, q := range n.queues {
		for range n.cfg.Workers {
			wg.Go(func() { n.work(ctx, drainCtx, q) })
		}
	}
	wg.Wait()
	n.closed.Store(true)
	// What no worker took before the drain ended.
	for _, q := range n.queues {
		for {
			select {
			case ev := <-q.jobs:
				n.count(q.target, ResultDropped)
				n.log.Warn("notification dropped: fulfiller stopped before it went out", "target", q.target.String(), "type", ev.Type, "proposal", ev.Proposal)
				continue
			default:
			}
			break
		}
	}
	return ctx.Err()
}

// work delivers q's jobs: while ctx lives it waits for them; after, it
// takes what is queued until the queue is empty or drain ends.
func (n *Notifier) work(ctx, drain context.Context, q *queue) {
	for {
		select {
		case ev := <-q.jobs:
			n.deliver(drain, q.target, ev)
		case <-ctx.Done():
			for drain.Err() == nil {
				select {
				case ev := <-q.jobs:
					n.deliver(drain, q.target, ev)
				default:
					return
				}
			}
			return
		}
	}
}

// deliver tries ev at t up to Config.Attempts times with exponential
// backoff, until ctx (the drain) ends.
func (n *Notifier) deliver(ctx context.Context, t Target, ev Event) {
	wait := n.cfg.Backoff
	var err error
	for attempt := 1; attempt <= n.cfg.Attempts; attempt++ {
		if attempt > 1 {
			if n.cfg.Metrics != nil {
				n.cfg.Metrics.NotificationRetry(t.Kind())
			}
			// Full jitter on the upper half: receivers that came back
			// are not hit by every fulfiller at once.
			d := wait/2 + rand.N(wait/2+1)
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				n.count(t, ResultDropped)
				n.log.Warn("notification dropped: fulfiller stopped while it was retried", "target", t.String(), "type", ev.Type, "proposal", ev.Proposal, "attempts", attempt-1, "err", err)
				return
			}
			wait = min(wait*2, n.cfg.MaxBackoff)
		}
		actx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
		err = t.Send(actx, ev)
		cancel()
		if err == nil {
			n.count(t, ResultSent)
			n.log.Debug("notification sent", "target", t.String(), "type", ev.Type, "proposal", ev.Proposal, "attempts", attempt)
			return
		}
		if errors.Is(err, ErrPermanent) {
			n.count(t, ResultFailed)
			n.log.Warn("notification failed; not retried", "target", t.String(), "type", ev.Type, "proposal", ev.Proposal, "attempts", attempt, "err", err)
			return
		}
		n.log.Debug("notification attempt failed", "target", t.String(), "type", ev.Type, "proposal", ev.Proposal, "attempt", attempt, "err", err)
	}
	n.count(t, ResultFailed)
	n.log.Warn(fmt.Sprintf("notification failed after %d attempts", n.cfg.Attempts), "target", t.String(), "type", ev.Type, "proposal", ev.Proposal, "err", err)
}

func (n *Notifier) count(t Target, result string) {
	if n.cfg.Metrics != nil {
		n.cfg.Metrics.Notification(t.Kind(), result)
	}
}

// wanter is a Target that takes only some events (e-mail: those naming
// someone with an address).
type wanter interface{ Wants(Event) bool }

func timeUntil(t time.Time) time.Duration { return time.Until(t) }

package mcpserve

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// lostCalls ends the calls held for approval by instances that are gone
// once their deadline has passed (docs/mcp.md "Several instances"): a
// call whose instance died and whose client never retried would
// otherwise keep its record, its held-call index entry and its open
// prompts in the cluster for ever. Every instance sweeps; the engine's
// EndLost moves each such record by compare-and-set, so exactly one
// instance ends it (rejected "timeout", its prompts cancelled, logged,
// deleted), and it never runs. Each sweep also deletes the index entries
// whose deadline has passed. It is a part: Start starts the one
// goroutine that sweeps, Stop ends it.
type lostCalls struct {
	eng      *enginePart
	reattach *reattacher
	every    time.Duration
	log      *slog.Logger

	stop    context.CancelFunc
	running sync.WaitGroup
}

// DefaultLostCallSweep is how often an instance looks for lost calls
// past their deadline when Config.LostCallSweep is zero.
const DefaultLostCallSweep = 30 * time.Second

// sweepTimeout bounds one sweep, so that an unreachable cluster fails
// it (logged, tried again) instead of holding it; a slower sweep only
// delays the next (the ticker drops the ticks missed).
const sweepTimeout = 10 * time.Second

// lostHow is the "resumed" line's message of a call ended by the sweep.
const lostHow = "ended after its deadline: nobody retried it, and the instance that held it was lost"

func (l *lostCalls) Start(ctx context.Context) error {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l.stop = stop
	l.running.Go(func() { l.run(sctx) })
	return nil
}

func (l *lostCalls) Stop() error {
	l.stop()
	l.running.Wait()
	return nil
}

// run sweeps every l.every until ctx ends.
func (l *lostCalls) run(ctx context.Context) {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.sweep(ctx)
		}
	}
}

// sweep is one look at the cluster; a store that cannot be read is
// logged and tried again at the next tick.
func (l *lostCalls) sweep(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	now := time.Now()
	ended, err := l.eng.engine.EndLost(sctx, now, lostHow)
	if err != nil {
		l.log.Warn("lost calls not ended; trying again at the next sweep", "err", err)
	}
	if len(ended) > 0 {
		l.log.Info("ended calls held by lost instances past their deadline", "proposals", ended)
	}
	if n, err := l.reattach.held.Expire(sctx, now); err != nil {
		l.log.Warn("held calls' index not swept; trying again at the next sweep", "err", err)
	} else if n > 0 {
		l.log.Debug("held calls' index: entries past their deadline deleted", "entries", n)
	}
}

package sidecar

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
	"github.com/mewkit/fulfiller/internal/ops"
)

// notifier is the part that tells Config.Notify's targets of prompts
// opening and ending; the sidecar has it only with targets. It starts
// before the join, so that a bad target stops the sidecar before it
// answers anything, and stops after the fulfiller: the prompt.ended of
// the prompts cancelled at shutdown still go out, within the notifier's
// drain. observer goes into the approvals' observer.
type notifier struct {
	cfg     notify.Config // Start makes the Notifier of it
	log     *slog.Logger
	n       *notify.Notifier
	running tasks // its Run
}

// newNotifier is the notifier of cfg's targets; nil without any.
func newNotifier(cfg *Config, metrics *ops.Metrics, log *slog.Logger) *notifier {
	if len(cfg.Notify) == 0 {
		return nil
	}
	return &notifier{
		cfg: notify.Config{Targets: cfg.Notify, Space: cfg.Space, InboxURL: cfg.InboxURL, Metrics: metrics, Logger: log.With("component", "notify")},
		log: log,
	}
}

// Start makes the notifier and runs it until Stop.
func (nt *notifier) Start(ctx context.Context) error {
	targets := nt.cfg.Targets
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Kind() + " " + t.String()
	}
	nt.n = notify.New(nt.cfg)
	nt.running.goRun(ctx, func(ctx context.Context) { _ = nt.n.Run(ctx) })
	nt.log.Info(fmt.Sprintf("notifying approvers through %d targets", len(targets)), "targets", names)
	return nil
}

// Stop lets the last notifications out and waits for the workers.
func (nt *notifier) Stop() error {
	nt.running.stop()
	return nil
}

// observer adds the notifier, when there is one, to the approvals'
// observer.
func (nt *notifier) observer(next func(elicit.Event)) func(elicit.Event) {
	if nt == nil {
		return next
	}
	return func(e elicit.Event) {
		next(e)
		nt.n.Observe(e)
	}
}

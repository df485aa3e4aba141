package sidecar

import (
	"context"
	"fmt"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/elicit/notify"
)

// notifier is the started notifier: observer goes into the elicitor's
// observer; stop, run after the elicitor has stopped, lets the last
// prompt.ended go out within the notifier's drain and waits for its
// workers.
type notifier struct {
	n    *notify.Notifier
	stop func()
}

// startNotifier makes and starts the notifier of Config.Notify; nil
// without targets.
func (s *Sidecar) startNotifier() *notifier {
	targets := s.cfg.Notify
	if len(targets) == 0 {
		return nil
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Kind() + " " + t.String()
	}
	nt := notify.New(notify.Config{Targets: targets, Space: s.cfg.Space, InboxURL: s.cfg.InboxURL, Metrics: s.ops.metrics, Logger: s.log.With("component", "notify")})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = nt.Run(ctx) }()
	s.log.Info(fmt.Sprintf("notifying approvers through %d targets", len(targets)), "targets", names)
	return &notifier{n: nt, stop: func() { cancel(); <-done }}
}

// observer adds the notifier to the elicitor's observer.
func (nt *notifier) observer(next func(elicit.Event)) func(elicit.Event) {
	return func(e elicit.Event) {
		next(e)
		nt.n.Observe(e)
	}
}

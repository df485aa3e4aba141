// Package notify tells approvers outside the space that a prompt waits
// for them and how it ended (docs/design.md, "Reaching approvers";
// docs/operations.md, "Notifications"): signed JSON webhooks, Slack
// incoming webhooks and e-mail.
//
// A Notifier is an observer of the humans' escalation (elicit.Config.Observer): it
// turns elicit.EventOpened and elicit.EventEnded into jobs on a bounded
// queue per target, which worker goroutines it owns deliver with retries.
// Nothing it does can delay or change a decision: Observe never blocks
// (a full queue drops its oldest job, counted), and a target that fails
// or hangs only costs its own deliveries.
package notify

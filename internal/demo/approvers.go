package demo

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/elicit/approver"
)

// simulated is a scripted human approver: it answers the approve card the
// way the story needs, or leaves it open (someone in a meeting) until the
// fulfiller cancels it.
type simulated string

// Ask implements approver.UI.
func (s simulated) Ask(ctx context.Context, c *approver.Card) (approver.Answer, error) {
	tool := ""
	if c.Tool != nil {
		tool = c.Tool.Name
	}
	var args struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(c.Arguments(), &args)
	switch {
	case tool == "delete_path" && args.Path == "/srv/prod/db":
		return approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "the migration is done; the old data can go"}, nil
	case tool == "write_file" && strings.HasPrefix(args.Path, "/srv/prod/payments/"):
		// The on-call approvers are busy elsewhere; the lead, asked when
		// they have not answered, approves.
		if string(s) == lead {
			return approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "the new limit was agreed with finance"}, nil
		}
	case tool == "write_file" && string(s) == bob:
		return approver.Answer{Action: approval.ActionAccept, Reason: "production is frozen for the release; write to staging"}, nil
	case tool == "read_file" && string(s) == alice && args.Path == "/srv/prod/logs/app.log" && c.Grant != nil && slices.Contains(c.Grant.Offers, "1h"):
		// Tired of being asked about logs: allow reading them for an hour.
		return approver.Answer{Action: approval.ActionAccept, Approve: true, Grant: "1h"}, nil
	case tool == "read_file" && string(s) == alice:
		return approver.Answer{Action: approval.ActionAccept, Approve: true, Reason: "logs are fine to read"}, nil
	}
	<-ctx.Done() // not answering: the prompt stays open until it is cancelled
	return approver.Answer{}, ctx.Err()
}

// Notify implements approver.UI: the narrator tells the story instead.
func (simulated) Notify(approver.Event) {}

// noPresence hides the fulfiller's comings and goings from the person's
// cards: in the demo the approvers join before the in-process fulfiller,
// so "not in the space" and "is in the space" would only be noise.
type noPresence struct{ approver.UI }

// Notify implements approver.UI.
func (u noPresence) Notify(ev approver.Event) {
	switch ev.Kind {
	case approver.EventFulfillerAbsent, approver.EventFulfillerJoined, approver.EventFulfillerLeft:
		return
	}
	u.UI.Notify(ev)
}

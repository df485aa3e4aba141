package decision

import (
	"encoding/json"
	"time"
)

// Tier is one step of an escalate decision's escalate_to (docs/design.md
// "Reaching approvers"): when the escalation is still open After it
// started, Approvers are asked too. They are further approvers of the
// same escalation: each approval counts once toward the same quorum, and
// the deadline does not move.
type Tier struct {
	After     time.Duration
	Approvers []string
}

// MarshalJSON writes the tier as the policy wrote it ("after": "15m").
func (t Tier) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		After     string   `json:"after"`
		Approvers []string `json:"approvers"`
	}{FormatDuration(t.After), t.Approvers})
}

// UnmarshalJSON reads a tier as MarshalJSON writes it, as strictly as a
// policy's: a stored decision must not come back asking someone else.
// (The rules between tiers, increasing after and no approver twice, are
// the decision's: policies checks them where a policy decides.)
func (t *Tier) UnmarshalJSON(b []byte) error {
	const field = "escalate_to[0]"
	members, err := readObject("escalate_to", b)
	if err != nil {
		return err
	}
	if members == nil {
		return malformed(field, "must be an object with after and approvers, got %s", kindOf(b))
	}
	var out Tier
	var haveAfter, haveApprovers bool
	for _, m := range members {
		switch m.key {
		case "after":
			haveAfter = true
			s, err := stringValue(field+".after", m.value)
			if err != nil {
				return err
			}
			if out.After, err = time.ParseDuration(s); err != nil {
				return malformed(field+".after", "%q is not a duration such as \"5m\" or \"90s\"", s)
			}
			if out.After <= 0 {
				return malformed(field+".after", "must be positive, got %q", s)
			}
		case "approvers":
			haveApprovers = true
			if out.Approvers, err = stringListValue(field+".approvers", m.value); err != nil {
				return err
			}
			if len(out.Approvers) == 0 {
				return malformed(field+".approvers", "must name at least one approver")
			}
			seen := map[string]bool{}
			for _, a := range out.Approvers {
				if seen[a] {
					return malformed(field+".approvers", "%q is listed twice", a)
				}
				seen[a] = true
			}
		default:
			return malformed(field, "unknown key %q (want after and approvers)", m.key)
		}
	}
	switch {
	case !haveAfter:
		return malformed(field+".after", "missing")
	case !haveApprovers:
		return malformed(field+".approvers", "missing")
	}
	*t = out
	return nil
}

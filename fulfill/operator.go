package fulfill

import (
	"encoding/json"
	"errors"
	"sort"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
	"github.com/mewkit/fulfiller/policies/toolmeta"
)

// ErrStoreUnavailable is wrapped by the operator methods' errors when the
// pending-work store could not be read or written: the answer is unknown
// (is the proposal pending elsewhere in the group?) rather than no.
var ErrStoreUnavailable = errors.New("pending-work store unavailable")

func sortSnapshots(s []Snapshot) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].Received.Before(s[j].Received) })
}

// recordSnapshot shows a record of the store as the operator API shows a
// proposal held here. Phases are named as the states are.
func recordSnapshot(r *lifecycle.Proposal) Snapshot {
	s := Snapshot{ID: r.ID, From: r.From, State: string(r.Phase), Received: r.Received,
		Method: r.Method, Tool: r.Tool, Owner: r.Owner}
	if r.Phase == lifecycle.AwaitingApproval {
		s.Deadline = r.Deadline
	}
	if d := r.Decision; d != nil {
		s.Target, s.Revision = d.Target, d.Revision
	}
	if r.Request != nil {
		s.Target = r.Request.Target
	}
	if t := r.Task; t != nil {
		s.Task = &TaskInfo{ID: t.ID, Spec: t.Spec, Status: t.Status, Created: t.Created, Deadline: t.Deadline}
	}
	return s
}

// maxTakes bounds the retries of a take that keeps losing to the owner's
// own writes (each prompt and approval it records is one).
const maxTakes = 10

// ToolView is a discovered tool as the operator API shows it (GET
// /v1/tools): what policies see of it.
type ToolView struct {
	Name        string `json:"name"`
	Server      string `json:"server"`
	Description string `json:"description,omitempty"`
	// Annotations are what policies see as input.tool.annotations: the
	// the operator's declared ones for a declared tool, else the owner's.
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// OwnerAnnotations are what the owner sent in tools/list, verbatim.
	OwnerAnnotations json.RawMessage `json:"owner_annotations,omitempty"`
	// Metadata is the --tool-metadata entry that applied, if any.
	Metadata    *toolmeta.Ref   `json:"metadata,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Execution   json.RawMessage `json:"execution,omitempty"`
	// Digest and PinnedDigest are an MCP upstream's tool's: the digest
	// of the definition it lists now and the one pinned for it, which
	// differ while a changed definition (input.tool.changed) waits for
	// `fulfiller mcp accept-tools`. Empty in a space.
	Digest       string `json:"digest,omitempty"`
	PinnedDigest string `json:"pinned_digest,omitempty"`
}

package fulfill

import (
	"testing"
	"time"

	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// A task line reports the whole task (spec, made, followed until), not
// only its id and status: the demo printed "(working, spec ), followed
// until 00:00:00" and the decision log's task record had the same blanks
// (issue 42).
func TestEventOfCarriesTheWholeTask(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := lifecycle.Line{Stage: "task", ProposalID: "p", TaskID: "t1", TaskStatus: "working",
		TaskSpec: "2025-11-25", TaskCreated: created, TaskDeadline: created.Add(time.Hour)}
	ev := eventOf(l)
	want := TaskInfo{ID: "t1", Spec: "2025-11-25", Status: "working", Created: created, Deadline: created.Add(time.Hour)}
	if ev.Task == nil || *ev.Task != want {
		t.Errorf("task %+v, want %+v", ev.Task, want)
	}
}

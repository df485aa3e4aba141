package lifecycle

import (
	"encoding/json"
	"testing"
	"time"
)

// What a front end names of a call (Proposal.Log) is kept with the
// record, so a resumed proposal's lines name it too, and every line the
// core makes of the proposal carries it; a record written before there
// was one reads back without it.
func TestLogFieldsKeptWithTheRecord(t *testing.T) {
	p := Proposal{ID: "p-1", From: "local", FrontEnd: "mcp", Method: "tools/call", Tool: "read_file", Addressee: "fs",
		Received: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC), Owner: "m1", Phase: Deciding,
		Log: &LogFields{Client: "claude-code", Server: "fs", RPCID: json.RawMessage(`7`)}}
	b, err := p.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Proposal
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if back.Log == nil || back.Log.Client != "claude-code" || back.Log.Server != "fs" || string(back.Log.RPCID) != "7" {
		t.Fatalf("the record %s read back with log fields %+v", b, back.Log)
	}
	if l := lineOf(&back, "rejected", nil); l.Log != back.Log {
		t.Errorf("the rejected line names %+v; want the record's %+v", l.Log, back.Log)
	}

	var old Proposal
	if err := old.UnmarshalJSON([]byte(`{"v":2,"id":"p-2","from":"local","front_end":"mcp","owner":"m1","phase":"deciding","received":"2026-12-02T08:00:00Z","deadline":"2026-12-02T08:01:00Z","decision_id":"d"}`)); err != nil {
		t.Fatal(err)
	}
	if old.Log != nil || lineOf(&old, "rejected", nil).Log != nil {
		t.Errorf("a record without log_fields reads back with %+v", old.Log)
	}
}

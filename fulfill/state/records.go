package state

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// recordBucket is where a store keeps its pending records, by key
// (key(id)), with a JetStream KV bucket's semantics: revisions that only
// grow, create-if-absent, and compare-and-set on the revision. A group
// shares a KV bucket (kvRecords); a store alone keeps its records in
// memory and in a log of their writes (recordLog).
//
// Errors: create finds a record (jetstream.ErrKeyExists), update and
// remove find another revision or none (isWrongLastSeq reports both), get
// finds none (jetstream.ErrKeyNotFound). Any other error leaves the write
// maybe applied: the caller reads the record again to know.
type recordBucket interface {
	create(ctx context.Context, k string, val []byte) (rev uint64, err error)
	get(ctx context.Context, k string) (jetstream.KeyValueEntry, error)
	update(ctx context.Context, k string, val []byte, last uint64) (rev uint64, err error)
	remove(ctx context.Context, k string, last uint64) error
	// all is every live record, the oldest write first.
	all(ctx context.Context) ([]jetstream.KeyValueEntry, error)
}

// kvRecords is a group's records: a KV bucket every member reads and
// writes, whose deletes leave markers that expire (markerTTL) for the
// members that watch it (WatchRecords).
type kvRecords struct {
	s  *Store
	kv jetstream.KeyValue
}

func (r kvRecords) create(ctx context.Context, k string, val []byte) (uint64, error) {
	return r.kv.Create(ctx, k, val)
}

func (r kvRecords) get(ctx context.Context, k string) (jetstream.KeyValueEntry, error) {
	return r.kv.Get(ctx, k)
}

func (r kvRecords) update(ctx context.Context, k string, val []byte, last uint64) (uint64, error) {
	return r.kv.Update(ctx, k, val, last)
}

func (r kvRecords) remove(ctx context.Context, k string, last uint64) error {
	return r.kv.Purge(ctx, k, jetstream.LastRevision(last), jetstream.PurgeTTL(markerTTL))
}

func (r kvRecords) all(ctx context.Context) ([]jetstream.KeyValueEntry, error) {
	return r.s.snapshot(ctx, r.kv)
}

// Package state is the one owner of fulfiller's pending-work persistence:
// proposals waiting for a human, for a fulfilment slot or for a tool's
// response; the "seen" proposal ids of docs/design.md rule 5; answers not yet
// delivered (the outbox); member leases for groups; and the JSON-RPC id
// blocks of rule 11.
//
// Everything lives in NATS JetStream, in every mode: key-value buckets,
// and for a store alone (memory, DIR) two streams of its own, where its
// pending records (recordLog) and seen ids (seenLog) are written many to
// a message and kept in memory, since no other process reads them:
//
//   - memory: an embedded, in-process NATS server whose buckets use
//     JetStream memory storage. Nothing survives Close.
//   - DIR: the same embedded server with file storage in DIR (created 0700),
//     no port opened (in-process connection). An acknowledged write is in
//     the kernel (it survives the process); Update, Enqueue and Ack also
//     wait for a sync of the file system shared by every writer waiting
//     (see groupSync), and Delete starts one within 50 ms.
//   - nats://… or tls://…: an external NATS cluster shared by a group of
//     fulfillers.
//
// Memory mode is not a second implementation: it runs the same code against
// the same server with a different storage type, so its claim, CAS and TTL
// semantics cannot diverge from the durable modes.
//
// Locks (docs/locks.md): Store.mu, Store.rpcMu, recordLog.mu, seenLog.mu
// and groupSync.mu are leaves: none is taken under another. rpcMu is held
// across the write that reserves a block of JSON-RPC ids; recordLog.mu
// across a read of its stream only to bring memory back to the stream
// (at Open, and after a failed publish), when every caller must wait for
// that anyway.
//
// Guarantees callers build on (see docs/state.md):
//   - Claim is an atomic create-if-absent: among any number of members that
//     claim one proposal id within SeenTTL, exactly one wins.
//   - Update and Delete of a pending record are compare-and-set on the
//     record's revision; a lost race is ErrConflict and nothing is written.
//     This also fences a member whose lease lapsed and whose work was adopted.
//   - A pending record's Request, once written, is never cleared or changed.
//   - Adopt moves each record of a lapsed member to exactly one adopter.
package state

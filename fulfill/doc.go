// Package fulfill owns the lifecycle of every proposal fulfiller sees: it
// validates it, asks the policy, routes the call to the tool owner, tracks the
// fulfilment, and makes sure the proposer gets exactly one answer.
//
// # One owner
//
// A *Fulfiller is the only holder of a pending proposal's state. Other parts
// (the escalation component, the operator API, metrics) ask it; nobody keeps
// a second copy. Every state change that ends a proposal goes through one
// guarded transition, so a proposal can be answered once and only once even
// when a deadline, a withdrawal and a human's answer race each other.
//
// States: received → deciding → (awaiting approval) → (queued) → fulfilling
// → done; or → rejected / withdrawn / superseded.
//
// # Pending work and backpressure
//
// Pending proposals live in an expirable LRU (hashicorp/golang-lru/v2) sized
// --max-pending with TTL --pending-ttl. When it is full, a new proposal is
// rejected "busy" at once: older work, including open human prompts, is never
// evicted to make room (evicting would turn a slow human into a silent drop).
// TTL expiry rejects "timeout", except that an open human prompt lives until
// its own deadline and an in-flight fulfilment until --fulfill-timeout.
//
// The LRU's eviction callback runs with the cache lock held and also fires on
// deliberate removals, so it only hands live entries to a queue that the
// Fulfiller drains on its own goroutine.
//
// # Lost links
//
// The gateway replays nothing. A fulfilment request is written at most
// once, never re-sent after a reconnect (a tool call must not run twice);
// if the write was cut by a lost session it is treated as sent. A tool
// owner that leaves during a fulfilment gets Config.OwnerRejoinGrace to
// come back (a dropped link is a leave too), and its response after its
// reconnect still counts; still away after the grace, the proposal is
// rejected "incapable". A request due while its owner is away is held for
// that grace and sent once the owner is back. Our own reconnect checks the
// new roster the same way, since leaves sent while we were away never
// reached us.
//
// # How `to` is read
//
// The reference gateway delivers every envelope to everyone, so a proposal's
// `to` is a request, not a route:
//
//   - no `to`, or `to` naming this fulfiller: ours to decide; the target is
//     the participant that offers the tool (from tools/list).
//   - `to` naming a present participant that is not a fulfiller (cannot send
//     mcp/request): ours to decide, and that participant is the target.
//   - `to` naming only other fulfiller-kind participants (they may send
//     tools/call requests): theirs; we leave it alone and answer nothing.
//   - `to` naming nobody present: ours, and routing fails "incapable".
//
// A policy decision's `target` overrides the target in every case.
package fulfill

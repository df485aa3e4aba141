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
// Pending proposals live in an LRU (hashicorp/golang-lru/v2) sized
// --max-pending, each with a --pending-ttl timer on Config.Clock. When it is
// full, a new proposal is rejected "busy" at once: older work, including
// open human prompts, is never evicted to make room (evicting would turn a
// slow human into a silent drop). TTL expiry rejects "timeout", except that
// an open human prompt lives until its own deadline and an in-flight
// fulfilment until --fulfill-timeout (their TTL starts again).
//
// The LRU's eviction callback also fires on deliberate removals, and on the
// goroutine of the caller (which may hold Fulfiller.mu), so it only hands
// live entries to a queue that the Fulfiller drains on its own goroutine.
//
// # Durable and shared pending work (Config.Store)
//
// With a Store (docs/design.md "Durable and shared pending work") each stage is
// recorded before the envelope that carries it out is written, and a
// record that cannot be written stops that envelope (fail closed):
//
//   - receive.go: Store.ClaimRecord replaces the in-process seen set
//     (rule 5) and picks the one group member that answers; the claim is
//     the record (phase deciding, or answered with the reject of an
//     invalid proposal), so a proposal claimed is one a restart or an
//     adopter answers. A lost claim sends nothing. A proposal refused
//     "busy" as it arrives is claimed without a record
//     (Store.ClaimDecision, one write; see claimAndAdmit). An unreachable
//     store: see claimed for what the proposer gets.
//   - escalate.go: the decision and the approval deadline (phase
//     awaiting_approval) before any human is asked; each prompt, with its
//     exact payload, before it is sent and each approval before it counts
//     (Escalation.RecordPrompt, RecordApproval).
//   - fulfil.go: queued work with the params to fulfil; the Request
//     (envelope id, JSON-RPC id, target, sent, deadline) before the
//     tools/call is written. Update failing → no request; reject "other",
//     or nothing when the record was adopted (state.ErrConflict).
//   - answer.go: a reject is recorded (phase answered, with its envelope
//     id) before its decision-log line and the reject are written, and the
//     record deleted after (see
//     markAnswered): a crash in between leaves a record whose resumer
//     sends the same reject again, so a proposer is never left without
//     its answer; a member whose work was adopted sends nothing more
//     about it. Ends with nothing to send delete the record at once.
//   - recover.go: on Run, this member's own records are resumed (their
//     seen key settled first, Store.Reclaim); then the
//     work of members whose lease lapsed is adopted and resumed the same
//     way (open prompts asked again from this member with the same ids, a
//     request already written never written again but awaited until its
//     deadline, expired prompts rejected "timeout" at once).
//   - operator.go: the operator API lists the group's records besides its
//     own work, and cancels another member's proposal by taking its record
//     (state.Store.Take) and ending it here; watchRecords drops, without a
//     word, any proposal whose record another member wrote (taken or
//     adopted), at once rather than at its next write.
//
// "busy" means the whole group is full: this member's pending work and
// what each peer published with its lease (state.MemberInfo.Pending)
// against the sum of its live members' --max-pending, read about once a
// second (watchGroup) from one lease record per member, never per
// proposal. The local --max-pending bound still refuses too.
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
// # Locks
//
// Until the package runs on fulfill/lifecycle's single event loop, a
// pending proposal is shared by about nine goroutines (the reader, claim
// and decide workers, timers, elicit's callbacks, store watchers, the
// operator API: fulfill/lifecycle's doc lists them), under these locks. Take them only in the order written; none is held across a send,
// a policy evaluation or a wait, except recMu across its own store write.
//
//  1. Fulfiller.mu: the pending counts, fulfilment slots and queue,
//     byRequest, byTask, claiming, closing, and the proposal fields marked
//     "under Fulfiller.mu". Held for bookkeeping only.
//  2. Under it, leaves: the pending LRU's own lock (pendingStore's add,
//     remove, get); pendingStore.mu (its eviction callback, which
//     golang-lru calls after letting its own lock go); catalog.mu (a
//     tool's annotations while routing; the catalog calls its onSpoof hook
//     after unlocking); a Clock's own lock (arming and stopping timers).
//
// proposal.recMu is apart from both: it orders the writes of one
// proposal's record and is held across that write (so that a fence, see
// handOverOne and recordChanged, never interleaves with a write in
// progress), and it is never held together with Fulfiller.mu, in either
// order: a function that needs both takes one, lets it go, then takes the
// other (keepAnswered). peerResponses.mu and the answered and rejects
// LRUs are leaves: nothing is locked under them.
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

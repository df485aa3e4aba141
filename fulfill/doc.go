// Package fulfill answers every proposal fulfiller sees: it validates it,
// asks the policy, routes the call to the tool owner, tracks the
// fulfilment, and makes sure the proposer gets exactly one answer.
//
// # One owner
//
// An *Engine is the shell around fulfill/lifecycle's Core, a pure
// transition function (state + event → effects) that owns every pending
// proposal of this member; one goroutine (lifecycle.Loop) applies its
// events. An Engine serves one FrontEnd, where proposals come from and
// answers go: a *Fulfiller is the MEW front end on one (a space's
// participant), fulfiller mcp's the MCP one (agent/mcpfront). Nobody keeps a second copy: the reader, the operator API and
// metrics ask the loop (Loop.Do; the reader places a response with
// Loop.Match, in one hand-off), and everything that happens to a
// proposal reaches the core as an event — frames read (shellframes.go),
// timers on Config.Clock, store results, the policy's answers, the
// approvers' answers, withdrawals, group changes and the operator's
// cancels. The core's lifecycle, exactly-once rules and
// simulator are described in fulfill/lifecycle's doc.
//
// The pieces, each tested alone and all of them together end to end:
//
//   - engine.go: FrontEnd, NewEngine and Run — the core, the loop, the
//     policy step, the record store, the journal and the approvals'
//     codec built once for a front end, and shutdown (answer the work
//     "other"; ShutdownAnswers counts what could not be written).
//     engine_wire.go: the Loop's Wire, the front end's with the
//     approvers' steps (Human, CreateGrant) and delivery reports.
//   - shell.go, frontend_mew.go: New and Run of the MEW front end — its
//     FrontEnd (space, catalog, wire: the proposer, roster and tools of
//     the policy input, routing), the reader, the group's watchers, and
//     the hand-over of work to a live peer at shutdown.
//   - shellframes.go: envelopes to events (proposal parsing and rule 1,
//     `to`, responses matched by correlation and sender, rule 12, and the
//     conflicting second answer, supersession, presence, refusals,
//     impersonation).
//   - policystep.go: lifecycle.Policy — the policy input (with the
//     front end's part), Decider, the front end's routing, grants, the
//     shadow policy, task choice and the proposer's deadline hint; it
//     writes the decided line (with its input).
//   - wire.go, wiretask.go: lifecycle.Wire — the envelopes (rejects and
//     their chats, fulfilment requests, cancellations, status chats,
//     relays of a task's outcome, the task follower).
//   - approvers.go: the approvers' channel of the core's escalation
//     (Config.Approvals) in a space — it writes the prompts the Codec
//     made and their cancellations and hands the core the answers; the
//     engine's wire reports each step with the humans and makes the
//     grants approvers chose once the approved call is committed.
//   - recordstore.go, shellstore.go: lifecycle.Store over Store
//     (state.Store, or state.Local in this process) — the record is the
//     Proposal, persisted as it is (records of older builds completed
//     once, migrate); the shell remembers the
//     revisions it wrote, so that a record another member wrote (an
//     operator's take, an adoption) releases the proposal here at once.
//   - journal.go: lifecycle.Journal over the Observer — lines become
//     Events; the lines of answers are written ahead to the decision log
//     (a fulfilling or escalated line it cannot take stops what follows,
//     fail closed) and announced to watchers once the envelope is written.
//   - shellgroup.go, shelloperator.go: the group's load for "busy",
//     adoption of lapsed members' work, the hand-over at shutdown, and
//     the operator API (the group's pending work; a cancel takes another
//     member's record and returns once its reject is committed).
//
// # Pending work and backpressure
//
// --max-pending bounds the proposals pending here, --max-pending-per-
// proposer and --max-pending-bytes the share of one proposer and the
// frames' bytes, and the group's load (each live member's published
// count against the sum of their --max-pending) the whole group's: a
// proposal over any of them is rejected "busy" as it is read, never by
// evicting older work. Each proposal has one deadline: the pending TTL
// while deciding or queued, the escalation's while humans are asked, the
// fulfil timeout once its request is committed, the task's once the
// owner made one.
//
// # Durable and shared pending work (Config.Store)
//
// The claim is the record (phase deciding, or answered with the reject
// of an invalid proposal); each stage is recorded before the envelope
// that carries it out is written, a reject is recorded before it is sent
// (the same envelope is sent again after a crash) and the record deleted
// after. A write that fails is tried again; nothing is sent about a
// proposal whose record does not say it is this member's to answer, so a
// store that is down makes proposers wait (and /readyz say so) rather
// than risk a second answer. On start this member's records are resumed;
// the work of members whose lease lapsed is adopted the same way (open
// prompts asked again with the same ids, a request already written never
// written again but awaited until its deadline).
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
// new roster the same way (the reader posts who left and who is here),
// since leaves sent while we were away never reached us.
//
// # Locks
//
// The lifecycle has none: the core is touched by the loop's goroutine
// only. The shell's locks are leaves; every lock of the module, with what
// it guards and the order where one is taken under another, is in
// docs/locks.md, which a test keeps complete.
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
//     One of them whose tools/list is being asked (it joined, or we did,
//     a moment ago) may be a tool server holding mcp/*: the proposal
//     waits for that list (at most Config.DiscoveryWait, off the reader)
//     and is ours if it offers the tool. A withdrawal by its proposer
//     meanwhile drops it.
//   - `to` naming nobody present: ours, and routing fails "incapable".
//
// A policy decision's `target` overrides the target in every case.
package fulfill

// Package lifecycle is the lifecycle of a pending proposal as a pure
// function: a non-concurrent Core (the model is golang-lru's
// non-concurrent core in a thin shell) whose Step takes the time and one
// event and returns the effects the shell must carry out. Step does no
// I/O, starts no goroutine and reads no clock; ids come from an IDs the
// shell gives it, JSON-RPC ids (Config.ReserveIDs) from those the shell
// reserved ahead (ReserveIDs, answered by IDsReserved; a request due
// while none is at hand waits queued), so Step never waits for the
// store's compare-and-set. Timers, store results, policy decisions, sends,
// withdrawals, answers, adoption and shutdown are all events, so one
// goroutine applying Step owns every pending proposal, and a seeded
// simulator (sim_test.go) can drive it through crashes and restarts.
//
// # The shell
//
// Package fulfill is the shell around this core: its Fulfiller runs a
// Loop with a Store over the state package, a Wire over the MEW space
// (with fulfill.Approvals, also the ApproverChannel of the core's
// escalation, whose Codec is elicit's), a Policy over OPA, routing and
// grants, and a Journal over its Observers; its package doc lists the
// pieces.
//
// # The core
//
// One Proposal type, persisted as it is (JSON), with one Phase enum and
// one Deadline: the pending TTL while deciding or queued, the approval
// deadline while humans are asked, the fulfil timeout once the request is
// committed, the task's own once the request became an MCP task. The
// decision is Proposal.Decision, its id DecisionID (minted at the claim,
// replaced only when an edit is decided again). Phases:
//
//	(claim) → Deciding → AwaitingApproval → Queued → Fulfilling → (deleted)
//	                  ↘          ↘            ↘          ↘    ↘
//	                                                        Task (task-augmented)
//	                                                          ↘
//	         Answered (reject, or a task's relayed result, committed) → (deleted)
//
// In memory, beside its record, a proposal is the record's Phase and its
// outcome, plus one small state per thing in flight, each carrying only
// the data it needs, so that a combination that cannot happen cannot be
// written: its claim (trying, held for the decision when alone on the
// store, carrying its decision, landed; what waits for the landing is
// dropped then), its record writes (idle, a write out, a reload out),
// its Decide (none, first, an edit's re-check with the edit), its
// fulfilment request at the owner (held for the owner, sending, out,
// never sent), its place among the fulfilment slots (queued, queued for
// an id, holding one), and its answer's sending (sending, to be sent
// again).
//
// Events: Proposed, Stored, Reloaded, Decided, Sent, Fired (deadline,
// retry, resend, rejoin grace, an escalation's next reminder or tier),
// WithdrawnBy, Responded (a task handle too), TaskStatus, TaskEnded,
// Answer (an approver's answer as read), PromptSent, Roster (this
// member's welcome: who is in the space), KeysChanged (the approver keys
// in force), SupersededBy, Cancelled
// (operator), Resumed (restart, adoption, operator take), Released
// (lease lost, record taken), ParticipantLeft and ParticipantJoined (the
// tool owner's and the approvers' presence), GroupLoad (the group's
// "busy", from the leases), Closing, IDsReserved. Effects: Write (claim, claim
// without a record, update, delete; compare-and-set; Soon when nothing
// sent waits for it), Reload, Decide (with the proposal and this
// member's load), SendReject, SendRequest, SendRelay, SendCancel,
// FollowTask, CancelTask, SendPrompt, CancelAsk, Human (a step with
// the humans: the decision log, metrics, notifications), CreateGrant,
// Status (status chats), Schedule, Log, ReserveIDs.
//
// Fulfilment slots (Config.MaxInflight) are shared among proposers: no
// proposer holds more than
// Config.MaxInflightPerProposer at once (a resumed request takes its
// slot even past the limits: it is out already), and a freed slot goes
// to the queued proposers in turn (round-robin), first come within a
// proposer; a proposer at its share is passed over and keeps its place.
//
// The humans' escalation is a sub-machine of Step (escalation.go) with
// elicit's semantics (without Config.Codec nobody can be asked, and an
// escalation is rejected "policy"): the approvers present (Roster, joins,
// leaves) are asked, the proposer never; fewer present than the quorum
// is "incapable" at once. Each prompt (its approver, envelope id, which
// IDs.PromptID makes unpredictable, JSON-RPC id, delegation chain,
// payload as Config.Codec made it, the delegates and grants it offers,
// its state: open, answered, handed on, unsent) is recorded before it
// is sent (SendPrompt), as a request is. An Answer is matched to its
// prompt by the core (rule 12: from the approver asked, the prompt's
// JSON-RPC id if it carries one), then verified and read by the Codec
// under the keys in force (KeysChanged; a prompt asked while its
// approver was keyed stays signed-only). A quorum of distinct
// approvers approving the same call (edits grouped by the call's key)
// approves it, and an edit is decided again (rule 7); a decline or
// approve:false vetoes ("disagree"), a cancel ends "other", a grant not
// offered refuses the approval; a delegation to a delegate the form
// offered asks that approver (never back along the chain, at most
// MaxDelegationHops); the decision's reminders (announced only) and
// escalate_to tiers (their approvers present asked) are TimerStep
// events counted from Proposal.Escalation.Since, steps not before the
// deadline dropped; the one Deadline rejects "timeout" with elicit's
// words. The escalation ends "incapable" once the quorum can no longer
// come, tiers still to come counted, and "disagree" when the approvers
// approved different edits. Every end cancels the open prompts
// (CancelAsk, with the end's reason; nothing on the wire for
// DropReason) and is announced (Human ended). A resumed record asks its
// open prompts again with the same ids and bytes, counts its recorded
// approvals once (a record of an earlier build gets its prompts' states
// and offers from its approvals, chains and payloads), and asks at once
// the tiers whose time passed meanwhile (their reminders are not sent
// late); a new welcome sends every open prompt again, and an approver
// who comes in and holds no prompt is asked. A grant an approver chose
// is created (CreateGrant) once the approved call is committed.
//
// Every decision-log line is made by one filler (lineOf) from its
// proposal: the proposer, method, tool and target (the route once
// decided, else the addressee), the revision, the task; each stage adds
// what the journal's event of that stage says (fulfilled: the outcome, the
// round trip and who approved; approved: who; escalated: whom, until
// when; superseded and ignored answers: who sent it, and what).
//
// Admission (refusal; the first that applies is what the proposer is
// told): shutting down
// ("other"), then "busy" for this member's MaxPending, the proposer's
// MaxPendingPerProposer, the group full (GroupLoad) and MaxPendingBytes
// (Proposal.Size). Looked at when the proposal is read, and only then:
// one refused is claimed without a record (Write.ClaimOnly, one store
// write under overload) and rejected, at most MaxPending such refusals
// waiting for a store that fails (one more is logged "ignored",
// store_unavailable); one admitted counts against the limits from then
// on (track keeps the load as entries come and go) and keeps its place.
// A request due while its tool owner is away is held
// (neither recorded nor sent) for Config.OwnerRejoinGrace and goes out
// when the owner is back; a fulfilment whose owner leaves gets the same
// grace, and its owner's response meanwhile counts; an owner still away
// at its end gets the proposal rejected "incapable", the request not
// cancelled once it was written (the owner that left has it, or lost
// it). A request the
// wire finds its owner away for (ErrAway: not in the roster, though no
// leave was read) is held the same way, recorded already, and goes out
// as it is when the owner is back. A request the gateway refuses
// (Refused) never reached its owner: rejected "other", nothing to
// cancel. Cancels say why (RejectRecord.CancelReason: "timeout",
// "shutdown", "the tool owner left"), and an escalation ends with the
// reason its approvers are told (withdrawn, superseded, "cancelled" for
// an operator, a reject's reason, DropReason).
// Loop (shell.go) is the shell: one goroutine steps the Core, each
// proposal's effects run in order, on a worker that runs them until one
// reports an event (a proposal's lines and the send after them are one
// trip), or on the loop's goroutine when they cannot wait (Immediate: an
// in-process store's write, a line only observed, a front end's send
// that hands the message to a goroutine of its own, as the MCP front
// end's do); their results come
// back as events, timers run on a Clock that tests control. A frame only
// the core can place (a response) is placed on its goroutine (Match),
// not asked about (Do) and then posted. Loop.Handoffs counts the
// goroutine hand-offs (fulfiller bench reports them per proposal).
//
// # Exactly once, and the order of effects
//
//   - The claim is the record (create-if-absent, group-wide): a claimed
//     proposal always has a record to resume; a proposal read but not yet
//     claimed dies with the process (the gateway replays nothing).
//   - Nothing is sent before the record that commits it is written: a
//     reject is written as phase Answered with its envelope id, then sent,
//     then the record deleted; a crash anywhere re-sends the same envelope.
//     A fulfilment request is written as phase Fulfilling with its ids,
//     then sent; a resumed one is never sent again, only awaited until its
//     Deadline, then cancelled and rejected "timeout" (the cancel is part
//     of the committed reject, so it is re-sent too).
//   - A store write that fails is tried again (never answered without its
//     record); one that fails and might have been applied (a timeout) is
//     settled by reading the record back (Reload): read back as the write
//     made it, it is written (what runs, an escalation say, runs on);
//     otherwise the record read is resumed. A claim never written by
//     its deadline is left alone: with no record, an answer could be a
//     second one.
//   - The one exception, by design: a proposal
//     refused at once ("busy", or shutting down) is claimed without a
//     record; a crash between that claim and its reject leaves its
//     proposer to its own timeout, which for "busy" is the same advice.
//     Its claim is tried until it lands (a try applied before is
//     recognised by its decision id), and its withdrawal meanwhile is
//     final (nobody can resume it).
//   - A task-augmented request's answer is not the proposer's: a task is
//     recorded before it is followed (FollowTask), and its end (or the
//     owner's answer when it made none) is the proposer's answer, relayed
//     as a committed RelayRecord: recorded, written, re-written with the
//     same ids after a crash, then deleted, as a reject is. Any other end
//     of a proposal whose task runs cancels the task at its owner (with a
//     reject's record, so again after a crash); a drop for another
//     member only stops following it.
//   - A withdrawal ends a proposal only before an answer is committed;
//     its record's delete makes it durable. A withdrawal of a proposal this
//     member does not hold is remembered, and applied if the record comes
//     to it later (adoption).
//   - Prompts are recorded before they are asked (sent once the write
//     holding them is durable); a resumed prompt is asked again with its
//     ids and bytes, a recorded approval counted again, once; every end
//     cancels the prompts still open, whichever member sent them, except
//     a drop for another member (which asks the same ids). A
//     status chat goes out once what it reports is recorded, is never an
//     answer, and one not written yet is dropped with the proposal's end.
//   - The decision log is written ahead of what it describes, in the
//     proposal's order of effects; a committed answer's line (rejected,
//     fulfilling, escalated, withdrawn) is written once its record is (a
//     resumed reject's again), so a crash cannot leave the line of an
//     answer that then never happens. The lines of fulfilling and
//     escalated are Line.Ahead: one the Journal cannot write fails
//     closed (the Loop drops the request, prompts and Status it was ahead of
//     and posts Unlogged; the proposal is rejected "other" with
//     Config.UnloggedMessage, its recorded request never sent nor
//     cancelled). A rejected line that cannot be written is only
//     reported: the reject still goes.
//   - Rule 10: a proposal's received line is written once its claim is
//     won; a claim lost to a winner the store names (ClaimedError) logs
//     its ignored line under the winner's decision, as a replay read
//     later does; the re-check of an edited call is asked with the id
//     of the decision it makes (Decide.DecisionID). Answers not taken
//     (forged, from another, another JSON-RPC id) make one line per
//     proposal.
//   - The shell carries out one proposal's effects in order (a crash cuts
//     the sequence, never reorders it) and stops carrying out those of a
//     Released proposal before its record can be adopted.
//
// # The simulator
//
// sim_test.go's TestSimulation runs one or two members, each a Core in
// the real Loop, over a shared store with compare-and-set, a
// broadcasting wire and the rest of the world as fake adapters
// (simloop_test.go). The Loop's goroutines, channels and waits are the
// simulator's (Loop.sched): one thing runs at a time, in the order the
// seed draws (a call into the world, a result taken by Run, a retry), so
// a seed replays exactly and a crash finds each call being made done or
// not. The world has proposers (valid, invalid, replayed
// ids; honest and forged withdrawals; frames of 64 to 512 bytes), a
// tool owner (answers with the JSON-RPC id, SDK-style without it, with a
// wrong id, forged from another participant, late, never; answers a
// task-augmented request with a task that changes status, ends, or is
// forgotten; leaves the space and comes back, losing the requests
// written while it is away), approvers (accept, edit, edit the policy
// then rejects, decline, cancel, forged, unsigned, late, never; an
// approver's own reject), store outages (writes refused, and writes
// applied but reported failed; reads, the records' read at start and id
// reservations failing and tried again), crashes (each call being made
// may or may not have happened), restarts, shutdowns, lease loss
// (the member crashed, or runs on and is released) with adoption by the
// other member, the group's load read from the leases, a member's
// session reconnecting (a new roster), and seeds with JSON-RPC ids
// reserved ahead (Config.ReserveIDs), with writes (alone), lines and
// sends Immediate, with
// small per-proposer and byte limits, shares of the fulfilment slots,
// crowds (three proposers, few slots), status chats on, the humans'
// escalation (three approvers leaving and joining, alice keyed and
// carol's key coming and going, quorums of one and two, reminders and
// escalate_to tiers, grants offered; answers that accept, edit,
// decline, cancel, delegate to one offered or not, fail, choose a grant
// offered or not, carry another JSON-RPC id, are forged or unsigned;
// prompts that could not be sent, or were lost while their approver was
// away). Invariants are checked as each
// envelope goes out (what may not go out after a proposal's end, as of
// when the Loop began sending it; a prompt only once its record holds
// it; a JSON-RPC id in one envelope only, a request's reserved when the
// core reserves them), after each
// step (each admission against the limits, counted apart from the core;
// no request committed while its owner is away as the member heard;
// "incapable" only after a grace with the owner still away; how a
// proposal running a task ended; no proposer holding more fresh
// fulfilments than its share, no queued proposal waiting while a slot
// it may take is free, freed slots going to the queued proposers in
// turn; a resumed escalation asking again only its recorded open
// prompts, each as recorded; an approver's approval recorded once; only
// approvers who accepted in an approved line (the quorum's model); a
// grant only for an approver who chose one; Soon on the
// writes nothing sent waits for, and only on those; every line filled),
// and at quiescence: see onWire, stepped, checkSlots, checkTurns,
// checkAsks, checkWrite, checkLine and final.
//
//	go test ./fulfill/lifecycle -run 'TestSimulation$'               # 20000 seeds (2000 with -short)
//	go test ./fulfill/lifecycle -run 'TestSimulation$' -seeds 200000 # a longer run
//	go test ./fulfill/lifecycle -run 'TestSimulation$' -seed 42 -v   # replay one seed with its trace
//
// # Choices that are not obvious
//
//   - A store that fails makes proposals wait (the core tries the write
//     again, and nothing is sent about a proposal whose record does not
//     say it is this member's to answer) rather than answering "busy" or
//     "other" at once: one answer across crashes over a fast one.
//     Alone on its store (Config.Alone) a claim is tried on past the
//     deadline and the proposal rejected "timeout" once it lands; in a
//     group it is given up at the deadline.
//   - Decide runs beside its proposal's lane: a withdrawal, an
//     operator's cancel or a record's delete never wait for the policy.
//     Alone on its store (Config.Alone) the policy is asked before the
//     claim is written, and the claim carries what the decision commits
//     (a fulfilment's request, a reject, an escalation's prompts): one
//     store write where the claim and an update were two. What the
//     decision emits (its lines, its timers) waits for the claim to
//     land, and is dropped with the decision if the claim is lost. A
//     decision slower than Config.ClaimHold does not hold the claim:
//     it goes as it is, and the decision follows it. The decision's
//     record (Decided.Note) is logged with the core's decided line, so
//     a decision the core does not take (the proposal ended, or its
//     claim lost to a replay's original) has none.
//   - Lines of frames set aside ("ignored") are written at once; the
//     others follow their proposal's effects (a withdrawn line once the
//     record is gone, after the prompts it cancelled).
//   - A relay is recorded before it is written and written again until
//     it is; a claim the store cannot settle is tried again.
package lifecycle

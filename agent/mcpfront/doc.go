// Package mcpfront is fulfiller's MCP front end: it stands in front of
// MCP servers (the upstreams) for any MCP client, so that every
// tools/call is decided by the same engine, policies and approvers as a
// proposal in a MEW space (../../docs/design.md, "The MCP front end";
// issue 40). It is named mcpfront, not mcp, so that it does not shadow
// the official SDK (github.com/modelcontextprotocol/go-sdk/mcp, v1.8.0),
// on which both its sides are built.
//
// # The proxy
//
// Each Upstream (a command over stdio, CommandUpstream; or a URL over
// Streamable HTTP, URLUpstream; ParseUpstream reads --upstream) has one
// go-sdk client session, kept up by Front.Run: started, listed (its
// tools pinned), and started again with backoff after it ends. Facing
// the clients, each upstream has one go-sdk server, with the upstream's
// serverInfo, instructions and capabilities (tools always, listChanged:
// fulfiller tells clients of changed definitions). ServeStdio serves the
// one client of `fulfiller mcp -- CMD ARGS`; Handler serves `mcp serve`
// at /mcp/NAME over Streamable HTTP (bearer tokens from --client-tokens
// as hashes, each session bound to its token; DNS-rebinding and
// cross-origin protection; bodies bounded; CheckListen refuses a
// non-loopback listener without tokens).
//
// Everything but tools/call passes through a receiving middleware:
// tools/list (the upstream's answer, its definitions observed and
// pinned), resources (list, templates, read, subscribe), prompts,
// completion, logging/setLevel; the upstream's notifications come back
// to the clients (progress under the client's own token, logging,
// resource updates, and list_changed, which the SDK's server sends only
// for its own features: a placeholder is added and removed at once to
// make it, and never listed). A client's notifications/cancelled ends
// the call's context, which cancels what the front end does for it.
//
// # The wire layer
//
// A tools/call does not go through the SDK's jsonrpc2 dispatch on
// either side (wire.go, lineconn.go, direct.go): each of its hand-offs
// (the request to a handler goroutine, the upstream call's waiter woken
// by the reader) wakes a parked thread, and together they cost more
// than the decision. A client's connection (ServeStdio) is wrapped: a
// tools/call the SDK's session would hand to passThrough unchanged
// (initialized, params that read strictly, no requestState) is proposed
// on the goroutine that read it, and answered on the same connection by
// the engine's Effects.Answer; a notifications/cancelled naming it
// cancels it. The request goes upstream with an id of the Front's own
// ("fulfiller:N", a string: the SDK's client's are integers) on the
// upstream's connection, with the _meta the SDK's client puts on its
// requests, and its response is taken on the goroutine that read it.
// Over a newline-delimited stream (stdio, pipes, a command upstream)
// the frames are read by the Front before the SDK's transport, which
// gets every other frame as it came over a pipe: framing, batches,
// limits and errors stay the SDK's. A call that must wait (a status, a
// prompt, a progress tick, the client's cancellation or departure) is
// promoted to the hold the SDK's handler runs for the others (call).
// Everything else (initialize, lists, resources, prompts, ping,
// elicitation and its answers, a 2026-07-28 client's retry, calls under
// Config.Reattach, Streamable HTTP on either side) is the SDK's.
//
// The caller is asked as the client's revision allows. A client of the
// handshake revisions (2025-11-25 and before) gets elicitation/create
// while the call is held in its handler. A 2026-07-28 client gets an
// input_required result (SEP-2322) whose requestState is the proposal
// id; its SDK asks the person and retries the call with the answers,
// which go to the engine, and the call is held again in the retry's
// handler (a retry naming a call not waiting for one, or another
// client's, is an invalid-params error). A client that never retries is
// withdrawn as disconnected after Config.RetryWait.
//
// # Plugging in the engine
//
// The front end decides nothing: it brings each tools/call in as a
// Proposal and carries out what the engine does about it. The seam is
// two small interfaces, shaped after fulfill/lifecycle's events and
// effects, so that the engine implements it with no change here:
//
//	front, err := mcpfront.New(mcpfront.Config{Engine: eng, Pins: pins}, ups...)
//	eng.UseMCP(front)          // (a name of the engine's choosing) its MCP Wire and ApproverChannel call front's Effects
//	go front.Run(ctx)          // upstreams supervised until ctx ends
//	front.ServeStdio(ctx, name, &mcp.StdioTransport{}) // or http.Serve(l, front.Handler(opts))
//
// Engine is what the engine offers (events in); Effects is what the
// *Front offers (effects out). Each Engine method returns once the
// engine has taken the event (lifecycle.Loop.Post); none waits for a
// decision, and no Effects method waits for a peer.
//
//	front end → engine                       lifecycle
//	Engine.Propose(Proposal)                 Proposed (the proposal read; ID is its id, Proposer its From)
//	Engine.Responded(Response)               Responded (the upstream's result or error for the request)
//	Engine.Answered(PromptAnswer)            Answer from "@caller": Payload {"jsonrpc":"2.0","id":…,"result":Result};
//	                                         Err: the prompt failed (AnswerFailed)
//	Engine.Withdrawn(Withdrawal)             WithdrawnBy (From the proposer; the client cancelled or left)
//
//	engine → front end                       lifecycle effect
//	Effects.SendRequest(Request)             SendRequest (Params, maybe edited); its error is the Sent's
//	Effects.SendCancel(Cancel)               SendCancel
//	Effects.Answer(Answer{Reject})           SendReject (Reason → Code, Message verbatim)
//	Effects.Answer(Answer{Result|Error})     the relay of the Responded: MCP has no owner that answers
//	                                         the proposer itself, so the engine answers with what came
//	Effects.Status(Status)                   Status (escalated, queued): progress when the client gave a token
//	Effects.SendPrompt(Prompt)               SendPrompt To "@caller": Params are the payload's params
//	                                         (elicit.Codec.Prompt's message, requestedSchema, _meta)
//	Effects.CancelPrompt(CancelPrompt)       CancelAsk, for each open prompt to "@caller"
//
// Other approvers (the team inbox, notifications) are the engine's own
// channels; the front end carries the caller only. What the engine must
// keep:
//
//   - One answer: Effects.Answer once per proposal it took (a second is
//     ErrAnswered); after Engine.Withdrawn it owes none (an Answer then
//     is ErrUnknown, and nothing reaches the client). Every request it
//     sent gets exactly one Responded, its failure included: an upstream
//     that died, is unreachable, answered garbage, or a request
//     cancelled is a Response with Failed and an isError Result naming
//     the upstream, which the engine relays like any result (and logs
//     as the outcome).
//   - "@caller" is present for a proposal exactly when
//     Proposal.Elicitation: a client that did not declare elicitation
//     is never prompted (SendPrompt refuses, ErrNoElicitation), so the
//     engine's escalation counts it absent and ends "incapable" at once
//     unless other approvers can reach the quorum. A prompt's answer
//     comes back once (none after CancelPrompt, or after the client
//     left: the Withdrawal says so); its Result is the ElicitResult as
//     the client sent it, which the engine reads with elicit's codec
//     (accept with approve true fulfils, approve false or decline is
//     "disagree", cancel is "other").
//   - Proposal.ID is minted here (a UUIDv7: unique across sessions,
//     instances and restarts) with the client's JSON-RPC id beside it
//     (RPCID); Proposal.Tool is input.tool (Server is the upstream's
//     NAME, Changed set when the definition differs from the one pinned),
//     Proposal.Client is the client's clientInfo (a claim), Proposer its
//     id (the token's client under serve, Config.ClientID over stdio),
//     FrontEnd "mcp".
//
// # Tool pins
//
// A definition's Digest covers its name, description, inputSchema and
// annotations. Pins (the store implements it; MemPins in memory) keeps
// the first seen per upstream NAME and tool; a call of a tool whose
// listed definition differs carries Tool.Changed {old, new} for the
// policy, until Pins.Accept (`fulfiller mcp accept-tools NAME`).
// Definitions are read when the upstream starts, on its list_changed,
// and on every client's tools/list.
//
// # Who owns what
//
// Front.Run owns the upstreams' supervisors, the requests sent upstream,
// the prompts out and the holds of promoted calls, and waits for them
// before it returns; the SDK owns the clients' sessions and their
// handlers (a held call is its handler, waiting), which Run closes as it
// ends. A stream's reading goroutine (lineconn.go) ends with the stream,
// which closing the session closes (os.Stdin's read ends only when the
// client closes it, as with the SDK's own transport). The tests check
// that nothing is left (goleak).
package mcpfront

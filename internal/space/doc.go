// Package space is a small in-process MEW Protocol v0.4 space for tests,
// benchmarks and `fulfiller demo`.
//
// It is a development fixture, not a production gateway: it has no
// authentication worth the name, keeps everything in memory, listens on
// 127.0.0.1 only and trusts every participant's `from`, exactly like the
// reference gateway it imitates. Never put it in front of real agents.
//
// New starts it on a free loopback port, or Config.Addr (like httptest.NewServer); URL gives
// the ws:// address to hand to a client, and Close stops every goroutine.
// DropAll, SetStalled and Tap exist so that tests can break the link, hang
// the gateway and see the exact bytes on the wire.
//
// # What it copies from the reference gateway
//
// The behaviour follows the frames recorded from `@mew-protocol/mew` 0.11.0
// in testdata/conformance/mew-v0.4 (see the README there):
//
//   - the URL path and query and the Authorization header are ignored; the
//     first frame must be a join frame ({"type":"join",…} or
//     {"kind":"system/join",…} with the fields top-level or under payload);
//     a missing participantId becomes participant-<epoch-ms>; the token only
//     decides capabilities, and unknown or missing tokens get Config.Default;
//   - the joiner alone gets a system/welcome whose capabilities always end
//     with {"id":"mcp-response","kind":"mcp/response"} (duplicates are
//     dropped by comparing whole objects); the others get a presence join,
//     and a presence leave (id only) when the socket goes away;
//   - every envelope is delivered to every participant of the space, sender
//     included, whatever its `to` says; protocol, id, ts and from are added
//     only when missing (client values win, even `from`), a string
//     correlation_id becomes a one-element array, and the delivered key
//     order is protocol, id, ts, from, then the sender's keys in its order;
//   - errors go to the offending socket only and never close it:
//     capability_violation (also for frames sent before the join, with
//     "to":[null]), VALIDATION_ERROR / PROCESSING_ERROR frames without id,
//     and invalid_request for system/register; system/heartbeat is allowed
//     from anyone and broadcast;
//   - the same id on a second socket takes the id over; when the first socket
//     closes, the id's session is removed, so the second socket hears nothing
//     more and its next send is refused with empty your_capabilities; a
//     second join on one socket registers the socket under both ids (it gets
//     every broadcast twice, and the first id stays behind as a ghost in
//     later welcomes when the socket closes);
//   - the gateway never pings; it answers pings with pongs;
//   - GET /health, GET /participants?space=… and
//     POST /participants/{id}/messages are served on the same port.
//
// # Where it differs (on purpose)
//
//   - Slow readers. Each socket has its own writer goroutine and a bounded
//     queue (Config.QueueSize). Frames are queued in one total order under
//     one lock, so every participant sees the same order, as with the
//     single-threaded reference. When a queue is full the space waits up to
//     Config.SlowClientTimeout for room and then drops that client like a
//     dead link (socket closed without a close frame, presence leave sent);
//     a socket write that takes longer than that drops the client too. So a
//     stuck reader can hold the space up for at most that long. The reference
//     buffers without bound instead.
//   - Capability grants. capability/grant and capability/revoke are relayed
//     like any envelope but change nothing: no welcome-update is sent and
//     capabilities stay as they were at join.
//   - Streams. stream/request gets no stream/open, active_streams is always
//     [], and a frame starting with #<stream-id># from a joined socket is
//     relayed as a binary frame to everyone in its space without checking
//     that the stream exists or belongs to the sender (the reference answers
//     such writes with unauthorized_stream_write).
//   - Capabilities belong to the space. The reference keeps one table keyed
//     by participant id across all spaces, so the same id joining two spaces
//     overwrites its capabilities in both; here spaces share nothing.
//   - Serialisation. The reference re-serialises envelopes with
//     JSON.stringify; this space only removes insignificant whitespace, so
//     number spellings (1.0) and string escapes (\u0041) reach receivers as
//     the sender wrote them. Integer-like top-level keys keep the sender's
//     position (JavaScript would move them first), duplicate top-level keys
//     keep the first position with the last value (as JavaScript does), and
//     a top-level array is treated as an empty object.
//   - Parse errors carry Go's encoding/json message, not V8's.
//   - Join fields participantId, space and token count only when they are
//     non-empty strings.
//   - HTTP injection. Config has no token-to-participant mapping, so a post
//     as participant P is accepted with any token from Config.Tokens or
//     with the token P joined with; the token decides the capabilities. The
//     reference insists on P's own token. A body that is not JSON gets a
//     short HTML error page, like the reference, but not its stack trace.
//   - Close closes every socket with a close frame (1001, going away). The
//     reference left sockets open on SIGTERM until the clients went away.
//   - Frames over 100 MiB close the socket (the ws library's default limit,
//     which the reference inherits).
package space

package state

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for Config's zero values.
const (
	DefaultSeenTTL = 24 * time.Hour
	DefaultLease   = 5 * time.Second
	// limitMarkerTTL is how long the markers the server writes when a
	// key's TTL runs out (a lease lapsing, a grant expiring) stay in a
	// bucket: long enough for every watcher (WatchLapsed, on any replica)
	// to see them. It is part of the buckets' configuration, which
	// members of a group share (see sameLimits).
	limitMarkerTTL = time.Minute
	// markerTTL is how long the marker of a purge (a record ended, an
	// answer delivered, a lease given up) stays. Every finished proposal
	// leaves one, so it is short: with a minute, a memory store at 4 000
	// proposals/s held 240 000 of them (about 100 MB, as much as the
	// rest of the process), and each sweep for lapsed members listed and
	// read every one. A watcher in this process sees a marker within
	// milliseconds of its write; one that lags further misses it and
	// learns as it would without the watch (its next compare-and-set
	// fails; the sweep finds a lease that is gone). Nothing else reads
	// markers: a create or compare-and-set behaves the same once the
	// marker is gone. One second is the server's TTL resolution.
	markerTTL = 2 * time.Second
	// embeddedMaxPayload bounds one record in the embedded server. A pending
	// record holds the proposal envelope (up to --max-frame, 1 MiB by
	// default) plus its decision and prompts, so NATS's 1 MiB default is too
	// small. External servers need max_payload set likewise (docs/state.md).
	embeddedMaxPayload = 8 << 20
	// defaultOpTimeout bounds a store operation whose context has no
	// deadline (JetStream's own default for requests).
	defaultOpTimeout = 5 * time.Second
)

// Errors callers branch on.
var (
	// ErrConflict: a compare-and-set lost its race (the record changed since
	// it was read, or was adopted by another member). Nothing was written.
	ErrConflict = errors.New("state: record changed since it was read")
	// ErrExists: a create found the record already there.
	ErrExists = errors.New("state: record exists")
	// ErrNotFound: no such record.
	ErrNotFound = errors.New("state: no such record")
	// ErrRequestRewritten: an update would clear or change a fulfilment
	// request already written (a tool call must not run twice).
	ErrRequestRewritten = errors.New("state: the fulfilment request of a record is written once")
	// ErrMemberAlive: Adopt was asked to take work from a member whose lease
	// is live.
	ErrMemberAlive = errors.New("state: member's lease is live")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("state: store closed")
)

// Config configures Open.
type Config struct {
	Mode Mode
	// Creds is a NATS credentials file for External mode ("" for none).
	Creds string
	// Replicas of each bucket. 0: 1 for embedded modes; for External, keep
	// an existing bucket's replicas, and create new buckets with 3, falling
	// back to 1 (with a warning) on a server that is not clustered.
	Replicas int
	// Space is the MEW space; every bucket is per space.
	Space string
	// Member is this fulfiller's participant id (owner of its claims,
	// records and lease). At most 180 bytes.
	Member string
	// SeenTTL is how long a proposal id stays "seen" (rule 5). 0: 24h.
	// Shared by the group: the last member to open sets the bucket's age.
	SeenTTL time.Duration
	// Lease is how long this member's lease lives without renewal. 0: 5s.
	// At least 1s (the server's TTL resolution).
	Lease time.Duration
	// MaxPending is this member's --max-pending, published in its lease so
	// the group's capacity is the sum over live members.
	MaxPending int
	// Logger receives store and embedded-server events; nil discards.
	Logger *slog.Logger
	// Observer receives measurements; nil discards.
	Observer Observer

	// rpcBlockBits: blocks of 2^rpcBlockBits JSON-RPC ids (even; 0:
	// the package's), for the package's tests that cross blocks.
	rpcBlockBits uint
}

// Store is pending state in NATS JetStream. Its methods are safe for
// concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	obs    Observer
	ns     *server.Server // embedded server, nil in External mode
	tmpDir string         // memory mode's store dir, removed on Close
	nc     *nats.Conn
	js     jetstream.JetStream
	// durable syncs the DIR store's writes to disk, shared by concurrent
	// writers; nil in the other modes (memory keeps nothing; an external
	// cluster syncs as its operator configures it).
	durable *groupSync
	// known caches what this store last wrote or read of each record,
	// so that Update need not read a record before writing it.
	known *lru.Cache[string, knownRecord]

	members, outbox, meta, grants, pins jetstream.KeyValue
	// records holds the pending records: pending, a group's KV bucket,
	// or recordLog, a store alone's log (pending nil).
	records   recordBucket
	pending   jetstream.KeyValue
	recordLog *recordLog
	// seen holds a group's seen ids (External), seenLog a store alone's
	// (embedded): exactly one of them is set.
	seen    jetstream.KeyValue
	seenLog *seenLog

	// unlock releases the state directory's lock (Dir), after the
	// embedded server has shut down.
	unlock func()
	// share is this process's part in a SharedDir directory.
	share *share
	// pinsMem is the pins bucket in memory, watched from the first Pin on.
	pinOnce sync.Once
	pinsMem atomic.Pointer[pins]

	rpcMu sync.Mutex
	// The reserved block of JSON-RPC ids: it starts at rpcStart, holds
	// rpcSize, rpcUsed are handed out, in rpcPerm's order.
	rpcStart, rpcSize, rpcUsed int64
	rpcPerm                    rpcPerm

	// sweepEvery is how often WatchLapsed looks for orphaned work besides
	// the lease events: 4 leases (tests set it higher to prove the events).
	sweepEvery time.Duration

	// pendingNow is this member's pending work as its owner last said
	// (SetPending), published with each lease renewal.
	pendingNow atomic.Int64

	mu       sync.Mutex
	closed   bool
	lease    *lease
	watchers sync.WaitGroup // WatchLapsed goroutines
	stop     chan struct{}  // closed by Close: stops watchers
}

// Open starts (or connects to) the store and makes sure its buckets exist.
// It fails when the store cannot be reached or written: fulfiller must not
// start deciding without somewhere to keep its work.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.SeenTTL == 0 {
		cfg.SeenTTL = DefaultSeenTTL
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease < time.Second {
		return nil, fmt.Errorf("state: lease %v is under 1s", cfg.Lease)
	}
	if cfg.SeenTTL < time.Second {
		return nil, fmt.Errorf("state: seen TTL %v is under 1s", cfg.SeenTTL)
	}
	if cfg.Member == "" || len(cfg.Member) > maxPlainID {
		return nil, fmt.Errorf("state: member id must be 1..%d bytes", maxPlainID)
	}
	if cfg.Replicas < 0 || cfg.Replicas > 5 {
		return nil, fmt.Errorf("state: replicas %d out of range 1..5", cfg.Replicas)
	}
	s := &Store{cfg: cfg, log: cfg.Logger, obs: cfg.Observer, stop: make(chan struct{}), sweepEvery: 4 * cfg.Lease}
	s.known, _ = lru.New[string, knownRecord](knownRecords) // fails only for a size under 1
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "state")
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	var err error
	switch cfg.Mode.Kind {
	case Memory, Dir:
		err = s.startEmbedded()
	case External:
		err = s.connect()
	case SharedDir:
		err = s.startShared(ctx)
	default:
		err = errors.New("state: no mode")
	}
	if err == nil {
		s.js, err = jetstream.New(s.nc)
	}
	if err == nil {
		err = s.openBuckets(ctx)
	}
	if err == nil {
		// Reserve the first id block now, so a store that cannot hand out
		// ids fails at start rather than on the first fulfilment.
		err = s.reserveRPCBlock(ctx)
	}
	if err != nil {
		s.shutdown()
		return nil, err
	}
	return s, nil
}

func (s *Store) startEmbedded() error {
	dir := s.cfg.Mode.Dir
	if s.cfg.Mode.Kind == Memory {
		// JetStream wants a store directory even when every stream is in
		// memory; give it a private one.
		tmp, err := os.MkdirTemp("", "fulfiller-state-")
		if err != nil {
			return fmt.Errorf("state: memory store dir: %w", err)
		}
		s.tmpDir, dir = tmp, tmp
	} else {
		if err := mkdirPrivate(dir, s.log); err != nil {
			return err
		}
		unlock, err := lockDir(dir)
		if err != nil {
			return err
		}
		s.unlock = unlock
		flush, release, err := fsSync(dir)
		if err != nil {
			return err
		}
		// "syncfs" is each sync of the file system, shared by the writers
		// "sync" reports one by one: their counts say how well syncs are
		// shared.
		timedFlush := func() (err error) {
			defer s.timed("syncfs", time.Now(), &err)
			return flush()
		}
		s.durable = newGroupSync(timedFlush, release)
	}
	opts := &server.Options{
		ServerName: "fulfiller-" + key(s.cfg.Member),
		DontListen: true,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		MaxPayload: embeddedMaxPayload,
		// Not SyncAlways: writes that must survive are synced by
		// s.durable, several writers to one sync (see groupSync), before
		// anything that depends on them goes out. JetStream's own
		// periodic sync (every 2 minutes) alone lost acknowledged writes
		// in Jepsen's analysis of NATS 2.12.1.
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("state: embedded NATS server: %w", err)
	}
	ns.SetLoggerV2(serverLogger{s.log.With("component", "nats")}, false, false, false)
	s.ns = ns
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("state: embedded NATS server in %s did not start", dir)
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Name("fulfiller "+s.cfg.Member))
	if err != nil {
		return fmt.Errorf("state: connect to embedded NATS server: %w", err)
	}
	s.nc = nc
	return nil
}

// mkdirPrivate creates dir 0700. An existing directory is left as the
// operator made it, with a warning when others can read it: pending
// proposals carry tool arguments.
func mkdirPrivate(dir string, log *slog.Logger) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("state: create %s: %w", dir, err)
		}
		// MkdirAll's mode is filtered by the umask; make sure.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state: chmod %s: %w", dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("state: %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("state: %s is not a directory", dir)
	case fi.Mode().Perm()&0o077 != 0:
		log.Warn("state directory is readable by others; pending proposals carry tool arguments", "dir", dir, "mode", fi.Mode().Perm().String())
	}
	return nil
}

func (s *Store) connect() error {
	opts := []nats.Option{
		nats.Name("fulfiller " + s.cfg.Member),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			s.log.Warn("store disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("store reconnected", "server", nc.ConnectedUrlRedacted())
		}),
	}
	if s.cfg.Creds != "" {
		if _, err := os.Stat(s.cfg.Creds); err != nil {
			return fmt.Errorf("state: creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(s.cfg.Creds))
	}
	nc, err := nats.Connect(strings.Join(s.cfg.Mode.URLs, ","), opts...)
	if err != nil {
		return fmt.Errorf("state: connect to %s: %w", s.cfg.Mode, err)
	}
	s.nc = nc
	return nil
}

// openBuckets creates or updates the buckets: six for a group's member;
// for a store alone four, the record log (recordLog) and the seen log
// (seenLog), into which the pending and seen buckets of an older
// fulfiller's DIR store are moved.
func (s *Store) openBuckets(ctx context.Context) error {
	storage := jetstream.FileStorage
	if s.cfg.Mode.Kind == Memory {
		storage = jetstream.MemoryStorage
	}
	open := func(kind string, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		c.Bucket = bucketName(kind, s.cfg.Space)
		c.Description = "fulfiller " + kind + " for space " + s.cfg.Space
		c.Storage = storage
		c.History = 1
		for {
			actx, cancel := context.WithTimeout(ctx, bucketAttempt)
			kv, err := s.bucket(actx, c)
			cancel()
			lost := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
			if err == nil || ctx.Err() != nil || !lost {
				return kv, err
			}
			s.log.Warn("bucket not created or bound within one try; trying again", "bucket", c.Bucket, "try", bucketAttempt, "err", err)
		}
	}
	// Created concurrently: in a cluster each is a round of the meta
	// group, and start-up waits for all of them.
	type spec struct {
		dst  *jetstream.KeyValue
		kind string
		cfg  jetstream.KeyValueConfig
	}
	specs := []spec{
		// outbox: no age; deletes leave markers that expire.
		{&s.outbox, "outbox", jetstream.KeyValueConfig{LimitMarkerTTL: limitMarkerTTL}},
		// members: per-key TTL (each member its own --lease); the expiry
		// marker is what WatchLapsed sees.
		{&s.members, "members", jetstream.KeyValueConfig{LimitMarkerTTL: limitMarkerTTL}},
		{&s.meta, "meta", jetstream.KeyValueConfig{}},
		// grants: per-key TTL (each grant until a while after its expiry).
		{&s.grants, "grants", jetstream.KeyValueConfig{LimitMarkerTTL: limitMarkerTTL}},
		// pins: fulfiller mcp's tool definitions, kept until accepted.
		{&s.pins, "pins", jetstream.KeyValueConfig{}},
	}
	if s.Shared() {
		// pending: no age; deletes leave markers that expire, which
		// the members watch (WatchRecords). Alone, the records go in
		// a log of their own (recordLog).
		specs = append(specs, spec{&s.pending, "pending", jetstream.KeyValueConfig{LimitMarkerTTL: limitMarkerTTL}})
		// seen: every key lives SeenTTL after its claim (bucket MaxAge),
		// no markers (nobody watches it, and markers would double its
		// writes). Alone, the ids go in a log of their own (seenLog).
		specs = append(specs, spec{&s.seen, "seen", jetstream.KeyValueConfig{TTL: s.cfg.SeenTTL}})
	}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		wg.Go(func() { *sp.dst, errs[i] = open(sp.kind, sp.cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if s.Shared() {
		s.records = kvRecords{s: s, kv: s.pending}
		return nil
	}
	rl, err := openRecordLog(ctx, s.js, bucketName("records", s.cfg.Space), storage, s.log, s.timed)
	if err != nil {
		return err
	}
	s.recordLog, s.records = rl, rl
	l, err := openSeenLog(ctx, s.js, bucketName("seenlog", s.cfg.Space), storage, s.cfg.SeenTTL, s.log, s.timed)
	if err != nil {
		return err
	}
	s.seenLog = l
	if s.cfg.Mode.Kind == Memory {
		return nil // a fresh server each start: no older store to move
	}
	if err := s.moveRecordBucket(ctx); err != nil {
		return err
	}
	return s.moveSeenBucket(ctx)
}

// bucket creates or updates one bucket, choosing its replicas as Config
// documents.
func (s *Store) bucket(ctx context.Context, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	c.Replicas = s.cfg.Replicas
	auto := c.Replicas == 0
	if auto {
		c.Replicas = 1
		if s.cfg.Mode.Kind == External {
			c.Replicas = 3
			if kv, err := s.js.KeyValue(ctx, c.Bucket); err == nil {
				if st, err := kv.Status(ctx); err == nil {
					if si, ok := st.(*jetstream.KeyValueBucketStatus); ok {
						c.Replicas = si.StreamInfo().Config.Replicas
					}
				}
			}
		}
	}
	// A bucket another member (or an earlier run) made with the same
	// limits is bound as it is: updating it would turn direct gets back on
	// (the KV config cannot say otherwise) and, while the stream takes the
	// update, leave its subjects without a responder for the members
	// already using it.
	//
	// So a bucket is created only where none exists (create-only), and
	// updated only when its limits differ (a changed --seen-ttl): nothing
	// else ever turns direct gets back on once leaderReads turned them off.
	kv, err := s.js.KeyValue(ctx, c.Bucket)
	switch {
	case err == nil && sameLimits(ctx, kv, c):
		return s.leaderReads(ctx, c.Bucket, kv)
	case err == nil:
		kv, err = s.js.UpdateKeyValue(ctx, c)
	default:
		kv, err = createKeyValue(ctx, s.js, c)
		if err != nil && auto && c.Replicas > 1 && isReplicasUnavailable(err) {
			s.log.Warn("store has too few JetStream servers for 3 replicas; bucket created with 1: one server's loss loses pending work",
				"bucket", c.Bucket, "err", err)
			c.Replicas = 1
			kv, err = createKeyValue(ctx, s.js, c)
		}
		if err != nil && (errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse)) {
			// Another member created it between our look and our
			// create: use theirs.
			kv, err = s.js.KeyValue(ctx, c.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("state: bucket %s (replicas %d): %w", c.Bucket, c.Replicas, err)
	}
	return s.leaderReads(ctx, c.Bucket, kv)
}

// bucketAttempt bounds one try at creating or binding a bucket. A
// cluster can lose the answer to a JetStream API request (its meta leader
// changing while the request was in flight), and the client then waits
// for its whole context: the state tests' three-server cluster saw a
// bucket's creation wait out two minutes at the first test after the
// cluster started. Each try is bounded and the bucket tried again:
// creating and binding one are idempotent (bucket). Tests shorten it.
var bucketAttempt = 20 * time.Second

// createKeyValue is js.CreateKeyValue; tests replace it to lose an answer.
var createKeyValue = func(ctx context.Context, js jetstream.JetStream, c jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return js.CreateKeyValue(ctx, c)
}

// sameLimits reports whether an existing bucket already has the limits c
// asks for (replicas are the operator's once the bucket exists).
func sameLimits(ctx context.Context, kv jetstream.KeyValue, c jetstream.KeyValueConfig) bool {
	st, err := kv.Status(ctx)
	if err != nil {
		return false
	}
	si, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	cfg := si.StreamInfo().Config
	return cfg.MaxAge == c.TTL && cfg.SubjectDeleteMarkerTTL == c.LimitMarkerTTL &&
		cfg.MaxMsgsPerSubject == int64(c.History) && cfg.Storage == c.Storage
}

// leaderReads turns off direct gets on a bucket's stream and binds to it
// again. KV buckets allow direct gets, which followers may serve, so a read
// right after a write can miss it (NATS documents no read-your-writes for
// KV). Here a read decides whether a compare-and-set is attempted and
// whether work is resumed, so reads go to the stream leader, which has
// applied every write it acknowledged.
func (s *Store) leaderReads(ctx context.Context, bucket string, kv jetstream.KeyValue) (jetstream.KeyValue, error) {
	st, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("state: bucket %s: %w", bucket, err)
	}
	cfg := st.CachedInfo().Config
	if cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("state: bucket %s: turn off direct gets: %w", bucket, err)
		}
		// While a replicated stream takes an update its subjects can be
		// without a responder: a write right after Open failed with "no
		// response from stream" (TestLapsedMemberIsAdoptedExactlyOnce,
		// once reads no longer took a consumer's creation to answer).
		if err := s.awaitPublishes(ctx, bucket); err != nil {
			return nil, err
		}
	}
	// Bind again in every case: kv may have been bound while direct gets
	// were on (our create, or another member's update between it and the
	// look above), and such a handle sends its reads to the direct-get
	// subjects, where nobody answers once they are off.
	kv, err = s.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("state: bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// awaitPublishes waits until bucket's stream answers a write: a publish
// to a probe key that expects a last sequence no key can have, which the
// stream refuses (wrong last sequence) without storing anything. Only
// "no response from stream" (nothing stored either) is waited out.
func (s *Store) awaitPublishes(ctx context.Context, bucket string) error {
	for {
		m := nats.NewMsg("$KV." + bucket + "." + probeKey)
		_, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(math.MaxUint64))
		switch {
		case err == nil:
			return fmt.Errorf("state: bucket %s: a probe that must be refused was stored", bucket)
		case !errors.Is(err, jetstream.ErrNoStreamResponse):
			return nil // answered: the refusal expected, or another error the writes will report
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("state: bucket %s does not answer writes: %w", bucket, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// probeKey is the key awaitPublishes writes to (and never stores): not a
// key any record, lease or grant can have (theirs are ids or hashes).
const probeKey = "_probe"

// isReplicasUnavailable reports a create that failed for want of servers:
// a non-clustered server refuses replicas > 1, a small cluster has too few
// peers.
func isReplicasUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10074, // replicas > 1 not supported in non-clustered mode
			10005, // no suitable peers for placement
			10023: // insufficient resources
			return true
		}
	}
	msg := err.Error()
	return strings.Contains(msg, "non-clustered") || strings.Contains(msg, "no suitable peers") ||
		strings.Contains(msg, "insufficient resources")
}

// Persistent reports whether the records outlive the process: false for
// --state memory, whose records die with it like Local's.
func (s *Store) Persistent() bool { return s.cfg.Mode.Kind != Memory }

// Shared reports whether other fulfillers can use this store (External
// mode: a group); an embedded server serves this process alone.
func (s *Store) Shared() bool { return s.cfg.Mode.Kind == External || s.cfg.Mode.Kind == SharedDir }

// Member returns this store's member id.
func (s *Store) Member() string { return s.cfg.Member }

// Ping checks that the store can accept a write now, for /readyz: it
// writes this member's ping key in the meta bucket, which needs the
// bucket's stream leader and, in a cluster, a quorum of its replicas.
// (Stream info is no such check: a leaderless replica answers it.)
func (s *Store) Ping(ctx context.Context) (err error) {
	defer s.timed("ping", time.Now(), &err)
	if s.isClosed() {
		return ErrClosed
	}
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("state: store connection %s", strings.ToLower(st.String()))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultOpTimeout)
		defer cancel()
	}
	if _, err := s.meta.Put(ctx, "ping-"+key(s.cfg.Member), []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("state: store not accepting writes: %w", err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops the lease (removing it, so peers adopt at once, unless its
// context was cancelled first, as in a crash) and the watchers, then closes
// the connection and any embedded server.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	l := s.lease
	s.mu.Unlock()
	close(s.stop)
	if l != nil {
		<-l.done // renew removes the lease when it sees stop
	}
	s.watchers.Wait()
	s.shutdown()
	return nil
}

func (s *Store) shutdown() {
	if s.recordLog != nil {
		s.recordLog.close()
	}
	if s.seenLog != nil {
		s.seenLog.close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.share != nil {
		s.share.close()
	}
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	if s.durable != nil {
		s.durable.close()
	}
	if s.tmpDir != "" {
		os.RemoveAll(s.tmpDir)
	}
	if s.unlock != nil {
		s.unlock() // last: the directory is free once its server is down
	}
}

// serverLogger sends the embedded server's log to slog. Notices are debug:
// the server is an implementation detail of fulfiller's own log.
type serverLogger struct{ l *slog.Logger }

func (g serverLogger) Noticef(format string, v ...any) { g.l.Debug(fmt.Sprintf(format, v...)) }
func (g serverLogger) Warnf(format string, v ...any)   { g.l.Warn(fmt.Sprintf(format, v...)) }
func (g serverLogger) Fatalf(format string, v ...any)  { g.l.Error(fmt.Sprintf(format, v...)) }
func (g serverLogger) Errorf(format string, v ...any)  { g.l.Error(fmt.Sprintf(format, v...)) }
func (g serverLogger) Debugf(format string, v ...any)  { g.l.Debug(fmt.Sprintf(format, v...)) }
func (g serverLogger) Tracef(format string, v ...any)  {}

// isWrongLastSeq reports a compare-and-set conflict from JetStream, in
// either of its forms: 10071 (R=1 streams) or 10164 (replicated streams).
func isWrongLastSeq(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, errLogRevision) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mewkit/fulfiller/fulfill/decision"
	"github.com/mewkit/fulfiller/internal/logbuf"
	"github.com/mewkit/fulfiller/policies"
)

// opaModule is the module whose `opa` command the comparison runs, at the
// version this binary embeds, so both sides run the same evaluator.
const opaModule = "github.com/open-policy-agent/opa"

// OPAVersion is the version of the embedded OPA (from the build info;
// v1.22.2 when the build carries none, as in some test binaries).
func OPAVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == opaModule {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "v1.22.2"
}

// OPAOptions configure the comparison with an OPA server sidecar.
type OPAOptions struct {
	// Bin is an opa binary to use. Empty: the one built earlier into
	// CacheDir, else build OPAVersion() there with `go install`.
	Bin      string
	CacheDir string // [os.UserCacheDir()/fulfiller]
	// Concurrency is how many decisions run at once on each side
	// [GOMAXPROCS, the fulfiller's default number of decision workers].
	Concurrency int
	Decisions   int // per side and round [20000]
	Rounds      int // alternating rounds; medians are reported [3]
	// Build, when set, receives the output of building OPA.
	Build io.Writer
	// Env is added to the server's environment (it inherits this
	// process's): the bench gives it the Go memory limit it runs under
	// itself, so that both sides' collectors work alike.
	Env []string
}

// Side is one side's figures (medians over the rounds).
type Side struct {
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	PerSecond float64 `json:"decisions_per_second"`
}

// Comparison is the embedded engine against an OPA server sidecar, on the
// same policy and the same inputs, with the same concurrency.
type Comparison struct {
	OPAVersion  string `json:"opa_version"`
	Inputs      int    `json:"inputs"`
	Concurrency int    `json:"concurrency"`
	Decisions   int    `json:"decisions_per_round"`
	Rounds      int    `json:"rounds"`
	Embedded    Side   `json:"embedded"`
	Server      Side   `json:"opa_server"`
	// Ratios: how many times lower the embedded latency is, and how many
	// times higher its throughput.
	P50Ratio        float64 `json:"p50_ratio"`
	P99Ratio        float64 `json:"p99_ratio"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	// Agree counts inputs on which both sides made the same decision
	// (action and reason); Disagree the others (must be 0).
	Agree    int    `json:"agree"`
	Disagree int    `json:"disagree"`
	Example  string `json:"disagreement,omitempty"`
	// FailedClosed counts embedded decisions that hit the engine's
	// evaluation timeout (they answered reject policy, as the sidecar
	// would).
	FailedClosed int64 `json:"embedded_failed_closed"`
}

// CompareOPA decides the same inputs with the embedded engine (Decide,
// what the fulfiller's workers call) and with an OPA server started from
// the engine's policy and data files (POST /v1/data/fulfiller/decision
// over HTTP with keep-alive), and reports both. The server is always
// stopped before CompareOPA returns.
func CompareOPA(ctx context.Context, engine *policies.Engine, inputs []*policies.Input, opts OPAOptions) (*Comparison, error) {
	if len(inputs) == 0 {
		return nil, errors.New("compare with OPA: no policy inputs were captured (did any proposal reach the policy?)")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = runtime.GOMAXPROCS(0)
	}
	if opts.Decisions <= 0 {
		opts.Decisions = 20_000
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 3
	}
	files := engine.Files()
	if len(files) == 0 {
		return nil, errors.New("compare with OPA: the policy is the built-in default, which OPA cannot load; give --policy")
	}
	bin, err := OPABinary(ctx, opts)
	if err != nil {
		return nil, err
	}
	srv, err := startOPA(ctx, bin, files, opts.Env)
	if err != nil {
		return nil, err
	}
	defer srv.stop()

	// The server gets the very document the embedded engine evaluates
	// (only the fields the policies read), encoded beforehand, which
	// favours it: the embedded side builds its document from the
	// proposal every time.
	bodies := make([][]byte, len(inputs))
	for i, in := range inputs {
		doc, err := engine.EvaluatedInput(in)
		if err != nil {
			return nil, fmt.Errorf("compare with OPA: encode input %d: %w", i, err)
		}
		bodies[i] = opaRequest(srv.addr, append(append([]byte(`{"input":`), doc...), '}'))
	}
	client, err := newOPAClient(ctx, srv.addr, opts.Concurrency)
	if err != nil {
		return nil, err
	}
	defer client.close()
	// A decision that failed closed (an evaluation over the engine's
	// timeout when the machine is busy) is counted, not fatal: it is what
	// the sidecar would have answered.
	var failedClosed atomic.Int64
	embedded := func(ctx context.Context, i int) (decision.Action, string, error) {
		d := engine.Decide(ctx, inputs[i%len(inputs)])
		if d.Err != nil {
			failedClosed.Add(1)
		}
		return d.Action, d.Reason, nil
	}
	server := func(ctx context.Context, i int) (decision.Action, string, error) {
		return client.query(bodies[i%len(bodies)])
	}

	c := &Comparison{OPAVersion: OPAVersion(), Inputs: len(inputs), Concurrency: opts.Concurrency, Decisions: opts.Decisions, Rounds: opts.Rounds}
	// Both sides decide every input once: a warm-up, and the check that
	// they agree.
	for i := range inputs {
		before := failedClosed.Load()
		ea, er, _ := embedded(ctx, i)
		if failedClosed.Load() != before {
			ea, er, _ = embedded(ctx, i) // once more: agreement is about the policy, not the clock
		}
		sa, sr, err := server(ctx, i)
		if err != nil {
			return nil, err
		}
		if ea == sa && er == sr {
			c.Agree++
		} else {
			c.Disagree++
			if c.Example == "" {
				c.Example = fmt.Sprintf("input %d: embedded %s/%s, OPA server %s/%s", i, ea, er, sa, sr)
			}
		}
	}
	var eRounds, sRounds []Side
	for range opts.Rounds {
		e, err := measure(ctx, opts.Concurrency, opts.Decisions, embedded)
		if err != nil {
			return nil, err
		}
		s, err := measure(ctx, opts.Concurrency, opts.Decisions, server)
		if err != nil {
			return nil, err
		}
		eRounds, sRounds = append(eRounds, e), append(sRounds, s)
	}
	c.Embedded, c.Server = medianSide(eRounds), medianSide(sRounds)
	c.FailedClosed = failedClosed.Load()
	if c.Embedded.P50 > 0 && c.Embedded.P99 > 0 && c.Server.PerSecond > 0 {
		c.P50Ratio = c.Server.P50 / c.Embedded.P50
		c.P99Ratio = c.Server.P99 / c.Embedded.P99
		c.ThroughputRatio = c.Embedded.PerSecond / c.Server.PerSecond
	}
	return c, nil
}

// measure runs n decisions with conc workers and summarises them.
func measure(ctx context.Context, conc, n int, decide func(context.Context, int) (decision.Action, string, error)) (Side, error) {
	var next atomic.Int64
	lats := make([][]int64, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]int64, 0, n/conc+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				if _, _, err := decide(ctx, i); err != nil {
					errs[w] = err
					break
				}
				lat = append(lat, int64(time.Since(t0)))
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return Side{}, err
	}
	if err := ctx.Err(); err != nil {
		return Side{}, err
	}
	all := slices.Concat(lats...)
	p := summarise(all)
	return Side{P50: p.P50, P99: p.P99, PerSecond: float64(len(all)) / wall.Seconds()}, nil
}

func medianSide(rounds []Side) Side {
	med := func(get func(Side) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return Side{
		P50:       med(func(s Side) float64 { return s.P50 }),
		P99:       med(func(s Side) float64 { return s.P99 }),
		PerSecond: med(func(s Side) float64 { return s.PerSecond }),
	}
}

// opaPath is what the comparison asks the server for.
const opaPath = "/v1/data/fulfiller/decision"

// opaRequest is a whole HTTP/1.1 request for body, encoded once.
func opaRequest(addr string, body []byte) []byte {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", opaPath, addr, len(body))
	return append([]byte(head), body...)
}

// opaClient queries the server over keep-alive connections, one per
// concurrent caller, each written and read by its caller alone.
//
// Not net/http's client: it runs a reader and a writer goroutine per
// connection and hands every request and response between them, which
// cost about 55 µs of this process's CPU per request in a profile of the
// comparison — CPU the server, on the same two cores, then lacked. Here a
// request is one write of bytes encoded beforehand, and the response is
// parsed by net/http's own ReadResponse.
type opaClient struct {
	conns chan *opaConn
	all   []*opaConn
}

type opaConn struct {
	c  net.Conn
	br *bufio.Reader
}

// opaRequestTimeout bounds one request: a server that stops answering
// fails the comparison instead of hanging it.
const opaRequestTimeout = 10 * time.Second

func newOPAClient(ctx context.Context, addr string, n int) (*opaClient, error) {
	cl := &opaClient{conns: make(chan *opaConn, n)}
	var d net.Dialer
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			cl.close()
			return nil, fmt.Errorf("OPA server: %w", err)
		}
		oc := &opaConn{c: c, br: bufio.NewReaderSize(c, 16<<10)}
		cl.all = append(cl.all, oc)
		cl.conns <- oc
	}
	return cl, nil
}

func (cl *opaClient) close() {
	for _, oc := range cl.all {
		oc.c.Close()
	}
}

// query sends one request encoded by opaRequest and reads the decision.
func (cl *opaClient) query(req []byte) (decision.Action, string, error) {
	oc := <-cl.conns
	defer func() { cl.conns <- oc }()
	if err := oc.c.SetDeadline(time.Now().Add(opaRequestTimeout)); err != nil {
		return "", "", fmt.Errorf("OPA server: %w", err)
	}
	if _, err := oc.c.Write(req); err != nil {
		return "", "", fmt.Errorf("OPA server: %w", err)
	}
	resp, err := http.ReadResponse(oc.br, nil)
	if err != nil {
		return "", "", fmt.Errorf("OPA server: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", "", fmt.Errorf("OPA server: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("OPA server: HTTP %d: %s", resp.StatusCode, lastLines(string(body), 1))
	}
	if resp.Close {
		return "", "", errors.New("OPA server: closed the connection (the comparison needs keep-alive)")
	}
	var out struct {
		Result *struct {
			Action decision.Action `json:"action"`
			Reason string          `json:"reason"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return "", "", fmt.Errorf("OPA server: decode answer: %w", err)
	}
	if out.Result == nil {
		return "", "", errors.New("OPA server: data.fulfiller.decision is undefined for an input")
	}
	return out.Result.Action, out.Result.Reason, nil
}

// OPABinary finds or builds the opa command: opts.Bin, else the copy
// built earlier into the cache directory, else it builds one there with
// `go install`. Callers may resolve it before a long run so that a missing
// go command fails fast; CompareOPA calls it too.
func OPABinary(ctx context.Context, opts OPAOptions) (string, error) {
	if opts.Bin != "" {
		if _, err := os.Stat(opts.Bin); err != nil {
			return "", fmt.Errorf("--opa-bin: %w", err)
		}
		return opts.Bin, nil
	}
	version := OPAVersion()
	dir := opts.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("compare with OPA: no cache directory for the opa binary (give --opa-bin): %w", err)
		}
		dir = filepath.Join(base, "fulfiller")
	}
	dir = filepath.Join(dir, "opa-"+version)
	bin := filepath.Join(dir, "opa")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("compare with OPA: building opa %s needs the go command (or give --opa-bin): %w", version, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("compare with OPA: %w", err)
	}
	cmd := exec.CommandContext(ctx, goTool, "install", opaModule+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if opts.Build != nil {
		fmt.Fprintf(opts.Build, "bench: building opa %s into %s (once)\n", version, dir)
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compare with OPA: go install %s@%s failed (give --opa-bin to use an installed opa): %w: %s",
			opaModule, version, err, lastLines(out.String(), 3))
	}
	return bin, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " ; ")
}

// opaServer is a running `opa run --server`.
type opaServer struct {
	addr   string // host:port
	url    string
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *logbuf.Buffer
}

// startOPA starts the server on a free loopback port and waits for its
// /health.
func startOPA(ctx context.Context, bin string, files []string, env []string) (*opaServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("compare with OPA: find a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	args := append([]string{"run", "--server", "--addr", addr, "--log-level", "error", "--skip-version-check"}, files...)
	s := &opaServer{addr: addr, url: "http://" + addr, cmd: exec.Command(bin, args...), exited: make(chan struct{}), stderr: &logbuf.Buffer{Max: 64 << 10}}
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	if len(env) > 0 {
		s.cmd.Env = append(os.Environ(), env...)
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("compare with OPA: start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("compare with OPA: opa run exited: %s", lastLines(s.stderr.String(), 3))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				client.CloseIdleConnections()
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("compare with OPA: no healthy /health at %s within 30s: %s", s.url, lastLines(s.stderr.String(), 3))
		}
	}
}

// stop kills the server and waits for it to be gone.
func (s *opaServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

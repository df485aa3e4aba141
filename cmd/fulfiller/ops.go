package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/approval"
	"github.com/mewkit/fulfiller/decisionlog"
	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/ops"
)

// opsFlags are the operations flags run and demo share: the decision log
// and the --http listener.
type opsFlags struct {
	decisionLog   string
	mask          []string
	http          string
	httpToken     string
	httpTokenFile string
	logSync       string
}

func (o *opsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.decisionLog, "decision-log", "", "write a JSON line per decision and outcome to `PATH` (- for stdout); reopened on SIGHUP")
	f.StringVar(&o.logSync, "decision-log-sync", string(decisionlog.SyncAlways), "when decision log records reach the disk: always (each answer waits for its record's fsync; concurrent ones share it) or interval (every second: faster, a crash loses up to a second)")
	f.StringArrayVar(&o.mask, "mask", nil, "input `PATH` to erase from the decision log, e.g. params.arguments.password (repeatable)")
	f.StringVar(&o.http, "http", "", "serve /healthz, /readyz, /metrics and the operator API on `ADDR` (e.g. 127.0.0.1:9464)")
	f.StringVar(&o.httpToken, "http-token", "", "bearer token the operator API (/v1/) requires; without one /v1/ answers 401 (prefer FULFILLER_HTTP_TOKEN or --http-token-file; never logged)")
	f.StringVar(&o.httpTokenFile, "http-token-file", "", "read the operator API's bearer token from `FILE` (read once at start, trimmed; mode 0600)")
}

// prepare resolves the operator API's token and checks the --http address
// against it. start and check both go through here, so --check refuses
// exactly what run refuses.
func (o *opsFlags) prepare(log *slog.Logger) (token string, err error) {
	if err := o.validate(); err != nil {
		return "", err
	}
	token, err = httpToken.resolve(log, o.httpToken, o.httpTokenFile)
	if err != nil {
		return "", err
	}
	if o.http != "" && token == "" && !isLoopback(o.http) {
		return "", usageErrorf("--http %s is reachable from other machines and no token guards the operator API: set --http-token-file or FULFILLER_HTTP_TOKEN, or bind 127.0.0.1", o.http)
	}
	return token, nil
}

// isLoopback reports whether a listen address binds loopback only. An
// empty host binds every interface; a host name other than localhost could
// resolve anywhere, so it does not count.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// check proves that start could open what the flags name, without
// starting or creating anything: the decision log must be appendable (see
// checkAppendable) and the address is bound and released at once.
func (o *opsFlags) check(log *slog.Logger) error {
	if _, err := o.prepare(log); err != nil {
		return err
	}
	if o.decisionLog != "" && o.decisionLog != "-" {
		if err := checkAppendable(o.decisionLog); err != nil {
			return decisionLogError(err)
		}
	}
	if o.http != "" {
		ln, err := net.Listen("tcp", o.http)
		if err != nil {
			return listenError(o.http, err)
		}
		_ = ln.Close()
	}
	return nil
}

// decisionLogError is how a decision log that cannot be opened stops
// fulfiller: a usage error naming the flag and the path once (decisionlog
// prefixes its errors with "decision log: ", which the flag says already).
func decisionLogError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "open" {
		return fileError("--decision-log", err)
	}
	return usageError(&wordedError{msg: "--decision-log " + strings.TrimPrefix(err.Error(), "decision log: "), cause: err})
}

// listenError is a usage error for an --http address that cannot be
// bound: the address and the system's reason ("address already in use"),
// without the system call's name.
func listenError(addr string, err error) error {
	msg := err.Error()
	var se *os.SyscallError
	var oe *net.OpError
	switch {
	case errors.As(err, &se):
		msg = se.Err.Error()
	case errors.As(err, &oe):
		msg = oe.Err.Error()
	}
	return usageError(&wordedError{msg: fmt.Sprintf("--http %s: %s", addr, msg), cause: err})
}

// checkAppendable proves path can be opened for appending as
// decisionlog.Open does, without writing or creating anything: an existing
// file is opened for append without O_CREATE and closed; a missing one
// needs a directory that takes new files. Errors read as opening path
// would.
func checkAppendable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := dirWritable(filepath.Dir(path)); err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return nil
}

// opsRuntime is the started operations surface. Its observers go into
// fulfill.Config and elicit.Config; close shuts it down in the order the
// design asks for: after fulfill.Run has returned, flush and close the
// decision log, then stop the HTTP server.
type opsRuntime struct {
	log     *slog.Logger
	dlog    *decisionlog.Logger
	metrics *ops.Metrics
	source  *ops.Source
	handler *ops.Handler
	server  *http.Server
	addr    string // the listener's address, once bound
	served  chan struct{}
	stopHUP func()
}

// validate checks the flags start would refuse, so that run --check and
// run fail alike.
func (o *opsFlags) validate() error {
	if _, err := decisionlog.ParseSyncMode(o.logSync); err != nil {
		return usageErrorf("--decision-log-sync %v", err)
	}
	if o.http != "" {
		_, port, err := net.SplitHostPort(o.http)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || (port != "0" && n == 0) {
			return usageErrorf("--http %q: want HOST:PORT, e.g. 127.0.0.1:9464 (0.0.0.0:9464 for every interface)", o.http)
		}
	}
	return nil
}

// start opens the decision log and starts the listener. Both fail as
// usage errors naming the flag: a path that cannot be written or an
// address that cannot be bound is a configuration mistake.
func (o *opsFlags) start(log *slog.Logger, keys approval.ApproverKeys) (*opsRuntime, error) {
	token, err := o.prepare(log)
	if err != nil {
		return nil, err
	}
	rt := &opsRuntime{log: log, source: &ops.Source{}, stopHUP: func() {}}
	rt.metrics = ops.NewMetrics(rt.source)
	if o.decisionLog != "" {
		syncMode, _ := decisionlog.ParseSyncMode(o.logSync)
		dl, err := decisionlog.Open(o.decisionLog, decisionlog.Options{
			Mask:   o.mask,
			Keyed:  keys.Has,
			Sync:   syncMode,
			Logger: log,
		})
		if err != nil {
			return nil, decisionLogError(err)
		}
		rt.dlog = dl
		// A log that cannot be written makes the fulfiller unready and
		// counts in the metrics (it also refuses to fulfil, see fulfill.Recorder).
		rt.source.SetAuditLog(dl)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-hup:
					if err := dl.Reopen(); err != nil {
						log.Error("decision log not reopened; still writing to the old file", "err", err)
					} else {
						log.Info("decision log reopened", "path", o.decisionLog)
					}
				case <-done:
					return
				}
			}
		}()
		rt.stopHUP = func() { signal.Stop(hup); close(done) }
	} else if len(o.mask) > 0 {
		log.Warn("--mask has no effect without --decision-log")
	}
	if o.http != "" {
		ln, err := net.Listen("tcp", o.http)
		if err != nil {
			rt.closeLog()
			return nil, listenError(o.http, err)
		}
		rt.addr = ln.Addr().String()
		rt.handler = ops.NewHandler(ops.Options{Source: rt.source, Metrics: rt.metrics, Token: token, Logger: log})
		rt.server = &http.Server{Handler: rt.handler, ReadHeaderTimeout: 10 * time.Second}
		rt.served = make(chan struct{})
		go func() {
			defer close(rt.served)
			if err := rt.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
		log.Info("serving health, metrics and the operator API", "addr", rt.addr, "token", token != "")
		if token == "" {
			log.Warn("the operator API (/v1/) is closed: every request gets 401 until a token is set with --http-token-file or FULFILLER_HTTP_TOKEN")
		}
	}
	return rt, nil
}

// observer is what fulfill.Config.Observer gets.
func (rt *opsRuntime) observer() fulfill.Observer {
	obs := fulfill.Observers{rt.metrics}
	if rt.dlog != nil {
		obs = append(obs, rt.dlog)
	}
	return obs
}

// approvalObserver is what elicit.Config.Observer gets.
func (rt *opsRuntime) approvalObserver() func(elicit.Event) {
	return func(e elicit.Event) {
		rt.metrics.ObserveApproval(e)
		if rt.dlog != nil {
			rt.dlog.ObserveApproval(e)
		}
	}
}

// running makes the live parts known to /readyz, /metrics and /v1/.
func (rt *opsRuntime) running(gw ops.Gateway, pol ops.Policy, ful *fulfill.Fulfiller, g ops.Grants) {
	rt.source.SetGateway(gw)
	rt.source.SetPolicy(pol)
	rt.source.SetCounter(ful)
	if rt.handler != nil {
		rt.handler.SetOperator(ful)
		rt.handler.SetGrants(g)
	}
}

// closeLog flushes and closes the decision log.
func (rt *opsRuntime) closeLog() {
	rt.stopHUP()
	if rt.dlog == nil {
		return
	}
	if err := rt.dlog.Close(); err != nil {
		rt.log.Error("decision log: records may be missing", "err", err)
	}
}

// stopHTTP stops the listener, letting requests in progress finish.
func (rt *opsRuntime) stopHTTP() {
	if rt.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rt.server.Shutdown(ctx); err != nil {
		rt.log.Warn("http server shutdown", "err", err)
		_ = rt.server.Close()
	}
	<-rt.served
}

// close shuts everything down in order; call it after fulfill.Run returned.
func (rt *opsRuntime) close() {
	rt.closeLog()
	rt.stopHTTP()
}

package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mewkit/fulfiller/elicit"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/decisionlog"
	"github.com/mewkit/fulfiller/internal/ops"
)

// OpsConfig is the operations surface: the decision log and the HTTP
// listener of /healthz, /readyz, /metrics and the operator API. The
// metrics exist in every sidecar, served or not: they are the observers
// run has always had on its hot path.
type OpsConfig struct {
	// DecisionLog is the decision log's path ("-": stdout; "": none).
	// It is reopened on SIGHUP.
	DecisionLog string
	// Mask lists the input paths erased from the decision log.
	Mask []string
	// Sync says when decision log records reach the disk.
	Sync decisionlog.SyncMode
	// HTTP is the listen address ("": no listener; port 0 picks one,
	// which OpsAddr then names).
	HTTP string
	// HTTPToken is the operator API's bearer token ("": /v1/ answers
	// 401). Never logged.
	HTTPToken string
}

// opsRuntime is the operations surface, the sidecar's first part. Its
// observers go into fulfill.Config and elicit.Config; its Stop, the
// last, shuts it down in the order the design asks for: after the
// fulfiller has stopped, flush and close the decision log, then stop
// the HTTP server.
type opsRuntime struct {
	log     *slog.Logger
	cfg     OpsConfig
	keyed   func(string) bool // which approvers sign, for the decision log
	dlog    *decisionlog.Logger
	metrics *ops.Metrics
	source  *ops.Source
	handler *ops.Handler
	server  *http.Server
	addr    string         // the listener's address, once bound
	serve   tasks          // the server's goroutine, ended by its Shutdown
	hup     chan os.Signal // SIGHUP, which reopens the decision log
	reopen  tasks          // the goroutine that does
}

// newOpsRuntime makes the metrics and their source; Start opens what
// cfg names.
func newOpsRuntime(log *slog.Logger, cfg OpsConfig, keyed func(string) bool) *opsRuntime {
	rt := &opsRuntime{log: log, cfg: cfg, keyed: keyed, source: &ops.Source{}}
	rt.metrics = ops.NewMetrics(rt.source)
	return rt
}

// Start opens the decision log, reopened on SIGHUP, and starts the
// listener. A failure is a *StartError of PartDecisionLog or PartHTTP,
// with nothing left running.
func (rt *opsRuntime) Start(ctx context.Context) error {
	log, cfg := rt.log, rt.cfg
	if cfg.DecisionLog != "" {
		dl, err := decisionlog.Open(cfg.DecisionLog, decisionlog.Options{
			Mask:   cfg.Mask,
			Keyed:  rt.keyed,
			Sync:   cfg.Sync,
			Logger: log,
		})
		if err != nil {
			return &StartError{Part: PartDecisionLog, Err: err}
		}
		rt.dlog = dl
		// A log that cannot be written makes the fulfiller unready and
		// counts in the metrics (it also refuses to fulfil, see fulfill.Recorder).
		rt.source.SetAuditLog(dl)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		rt.hup = hup
		rt.reopen.goRun(ctx, func(ctx context.Context) {
			for {
				select {
				case <-hup:
					if err := dl.Reopen(); err != nil {
						log.Error("decision log not reopened; still writing to the old file", "err", err)
					} else {
						log.Info("decision log reopened", "path", cfg.DecisionLog)
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	if cfg.HTTP != "" {
		ln, err := net.Listen("tcp", cfg.HTTP)
		if err != nil {
			rt.closeLog()
			return &StartError{Part: PartHTTP, Err: err}
		}
		rt.addr = ln.Addr().String()
		rt.handler = ops.NewHandler(ops.Options{Source: rt.source, Metrics: rt.metrics, Token: cfg.HTTPToken, Logger: log})
		rt.server = &http.Server{Handler: rt.handler, ReadHeaderTimeout: 10 * time.Second}
		rt.serve.goRun(ctx, func(context.Context) {
			if err := rt.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		})
		log.Info("serving health, metrics and the operator API", "addr", rt.addr, "token", cfg.HTTPToken != "")
		if cfg.HTTPToken == "" {
			log.Warn("the operator API (/v1/) is closed: every request gets 401 until a token is set with --http-token-file or FULFILLER_HTTP_TOKEN")
		}
	}
	return nil
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

// running makes the live parts known to /readyz, /metrics and /v1/:
// the front end (gw), the policy, the lifecycle's counts and operator
// API (a *fulfill.Fulfiller is both) and the grants.
func (rt *opsRuntime) running(gw ops.Gateway, pol ops.Policy, counter ops.Counter, op ops.Operator, g ops.Grants) {
	rt.source.SetGateway(gw)
	rt.source.SetPolicy(pol)
	rt.source.SetCounter(counter)
	if rt.handler != nil {
		rt.handler.SetOperator(op)
		rt.handler.SetGrants(g)
	}
}

// closeLog flushes and closes the decision log.
func (rt *opsRuntime) closeLog() {
	if rt.hup != nil {
		signal.Stop(rt.hup)
		rt.reopen.stop()
		rt.hup = nil
	}
	if rt.dlog == nil {
		return
	}
	if err := rt.dlog.Close(); err != nil {
		rt.log.Error("decision log: records may be missing", "err", err)
	}
}

// stopHTTP stops the listener, letting requests in progress finish for
// up to 5 seconds.
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
	rt.serve.stop()
	rt.server = nil
}

// Stop shuts everything down in order, the decision log then the
// listener; the runner calls it after the fulfiller has stopped. What
// fails is logged.
func (rt *opsRuntime) Stop() error {
	rt.closeLog()
	rt.stopHTTP()
	return nil
}

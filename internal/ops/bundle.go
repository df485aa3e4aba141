package ops

import "github.com/prometheus/client_golang/prometheus"

// The bundle download metrics (run --bundle-url). The last-success gauge
// exists from the start (0), so that an alert on "no success for N
// minutes" fires even when no download ever succeeds; the counter has a
// series per result once that result happened.
func (m *Metrics) registerBundle(reg *prometheus.Registry) {
	m.bundleDownloads = registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fulfiller_bundle_downloads_total",
		Help: "Downloads of the --bundle-url policy bundle by result: ok (a new bundle is in force), not_modified (304: the bundle in force is current), failed (no bundle came: network, timeout, HTTP status), refused (a bundle came and was refused: too large, bad signature, not a bundle, does not compile); after failed and refused the last good policy stays in force."},
		[]string{"result"}))
	m.bundleSuccess = registered(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "fulfiller_bundle_last_success_timestamp_seconds",
		Help: "Unix time of the last --bundle-url download that left the served bundle in force (ok or not_modified); 0 before the first."}))
}

// ObserveBundleDownload implements policies.BundleObserver.
func (m *Metrics) ObserveBundleDownload(result string) {
	m.bundleDownloads.WithLabelValues(result).Inc()
	if result == "ok" || result == "not_modified" {
		m.bundleSuccess.SetToCurrentTime()
	}
}

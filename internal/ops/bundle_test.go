package ops_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mewkit/fulfiller/internal/ops"
	"github.com/mewkit/fulfiller/policies"
)

// TestBundleDownloadMetrics: every download is counted by result, and only
// ok and not_modified move the last-success time.
func TestBundleDownloadMetrics(t *testing.T) {
	m := ops.NewMetrics(&ops.Source{})
	var _ policies.BundleObserver = m
	if body := scrape(t, m); !strings.Contains(body, "\nfulfiller_bundle_last_success_timestamp_seconds 0\n") {
		t.Fatalf("before any download:\n%s", grepLines(body, "fulfiller_bundle"))
	}
	m.ObserveBundleDownload(policies.BundleFailed)
	m.ObserveBundleDownload(policies.BundleRefused)
	if body := scrape(t, m); !strings.Contains(body, "\nfulfiller_bundle_last_success_timestamp_seconds 0\n") {
		t.Fatalf("after failures only:\n%s", grepLines(body, "fulfiller_bundle"))
	}
	before := time.Now().Unix()
	m.ObserveBundleDownload(policies.BundleOK)
	m.ObserveBundleDownload(policies.BundleNotModified)
	m.ObserveBundleDownload(policies.BundleNotModified)
	body := scrape(t, m)
	for _, want := range []string{
		`fulfiller_bundle_downloads_total{result="failed"} 1`,
		`fulfiller_bundle_downloads_total{result="refused"} 1`,
		`fulfiller_bundle_downloads_total{result="ok"} 1`,
		`fulfiller_bundle_downloads_total{result="not_modified"} 2`,
	} {
		if !strings.Contains(body, "\n"+want+"\n") {
			t.Errorf("missing %s in:\n%s", want, grepLines(body, "fulfiller_bundle"))
		}
	}
	ts := regexp.MustCompile(`\nfulfiller_bundle_last_success_timestamp_seconds (\S+)\n`).FindStringSubmatch(body)
	if ts == nil {
		t.Fatalf("no last-success time:\n%s", grepLines(body, "fulfiller_bundle"))
	}
	if v, err := strconv.ParseFloat(ts[1], 64); err != nil || int64(v) < before || int64(v) > time.Now().Unix() {
		t.Errorf("last success %s, want about now", ts[1])
	}
}

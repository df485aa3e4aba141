package main

import (
	"strings"
	"testing"
)

// TestRunFlagErrors: every bad value of a run flag stops fulfiller before
// it joins anything, with exit code 2 and one line naming the flag, so an
// operator sees at once which setting is wrong.
func TestRunFlagErrors(t *testing.T) {
	const gw = "--gateway=ws://127.0.0.1:1"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, "--gateway is required"},
		{[]string{"--gateway", "http://127.0.0.1:1"}, "--gateway"},
		{[]string{gw, "--id", ""}, "--id"},
		{[]string{gw, "--max-pending", "0"}, "--max-pending 0"},
		{[]string{gw, "--max-inflight", "-1"}, "--max-inflight -1"},
		{[]string{gw, "--pending-ttl", "0s"}, "--pending-ttl"},
		{[]string{gw, "--fulfill-timeout", "-1s"}, "--fulfill-timeout"},
		{[]string{gw, "--owner-rejoin-grace", "0s"}, "--owner-rejoin-grace"},
		{[]string{gw, "--approval-timeout", "0s"}, "--approval-timeout"},
		{[]string{gw, "--policy-timeout", "0s"}, "--policy-timeout"},
		{[]string{gw, "--max-frame", "lots"}, "--max-frame"},
		{[]string{gw, "--decision-log-sync", "sometimes"}, "--decision-log-sync"},
		{[]string{gw, "--max-pending-per-proposer", "-1"}, "--max-pending-per-proposer -1"},
		{[]string{gw, "--max-pending-bytes", "0"}, "--max-pending-bytes"},
		{[]string{gw, "--max-pending-bytes", "lots"}, "--max-pending-bytes"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := newRootCmd()
			root.SetArgs(append([]string{"run"}, tc.args...))
			root.SetOut(new(strings.Builder))
			root.SetErr(new(strings.Builder))
			err := root.Execute()
			if err == nil || exitCode(err) != 2 {
				t.Fatalf("err = %v (exit %d), want a usage error (exit 2)", err, exitCode(err))
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("message %q does not name %q on one line", msg, tc.want)
			}
		})
	}
}

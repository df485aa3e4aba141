package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// probeCmd is a subcommand with the kinds of flags the real ones have, so
// the flag > env > file precedence can be checked without running anything.
func probeRoot(got *probe) *cobra.Command {
	root := newRootCmd()
	cmd := &cobra.Command{
		Use: "probe",
		RunE: func(cmd *cobra.Command, _ []string) error {
			got.id, _ = cmd.Flags().GetString("id")
			got.maxPending, _ = cmd.Flags().GetInt("max-pending")
			got.ttl, _ = cmd.Flags().GetDuration("pending-ttl")
			got.policies, _ = cmd.Flags().GetStringArray("policy")
			return nil
		},
	}
	cmd.Flags().String("id", "fulfiller", "")
	cmd.Flags().Int("max-pending", 1000, "")
	cmd.Flags().Duration("pending-ttl", time.Minute, "")
	cmd.Flags().StringArray("policy", nil, "")
	root.AddCommand(cmd)
	return root
}

type probe struct {
	id         string
	maxPending int
	ttl        time.Duration
	policies   []string
}

func runProbe(t *testing.T, args ...string) (probe, error) {
	t.Helper()
	var got probe
	root := probeRoot(&got)
	root.SetArgs(append([]string{"probe"}, args...))
	root.SetOut(new(strings.Builder))
	err := root.Execute()
	return got, err
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fulfiller.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigPrecedence(t *testing.T) {
	cfg := writeConfig(t, "id: from-file\nmax-pending: 7\npending-ttl: 5m\npolicy: [a.rego, b.rego]\n")

	got, err := runProbe(t, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.id != "from-file" || got.maxPending != 7 || got.ttl != 5*time.Minute || strings.Join(got.policies, ",") != "a.rego,b.rego" {
		t.Errorf("file only: %+v", got)
	}

	t.Setenv("FULFILLER_MAX_PENDING", "9")
	t.Setenv("FULFILLER_ID", "from-env")
	got, err = runProbe(t, "--config", cfg, "--id", "from-flag")
	if err != nil {
		t.Fatal(err)
	}
	if got.id != "from-flag" || got.maxPending != 9 || got.ttl != 5*time.Minute {
		t.Errorf("flag > env > file: %+v", got)
	}

	t.Setenv("FULFILLER_CONFIG", cfg)
	got, err = runProbe(t)
	if err != nil {
		t.Fatal(err)
	}
	if got.id != "from-env" || got.ttl != 5*time.Minute {
		t.Errorf("config path from env: %+v", got)
	}
}

func TestConfigErrorsAreUsageErrors(t *testing.T) {
	cases := []struct {
		name, config, env, wantMsg string
		args                       []string
	}{
		{name: "unknown key", config: "max_pending: 3\n", wantMsg: `unknown key "max_pending"`},
		{name: "bad value in file", config: "max-pending: lots\n", wantMsg: "key max-pending"},
		{name: "bad env", env: "soon", wantMsg: "FULFILLER_PENDING_TTL"},
		{name: "bad flag", args: []string{"--max-pending", "x"}, wantMsg: "--max-pending"},
		{name: "unknown flag", args: []string{"--nope"}, wantMsg: "unknown flag: --nope"},
		{name: "missing file", args: []string{"--config", "/nonexistent/f.yaml"}, wantMsg: "config /nonexistent/f.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.config != "" {
				args = append(args, "--config", writeConfig(t, tc.config))
			}
			if tc.env != "" {
				t.Setenv("FULFILLER_PENDING_TTL", tc.env)
			}
			_, err := runProbe(t, args...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Fatalf("err = %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || strings.Contains(oneLine(err.Error()), "\n") {
				t.Errorf("message %q does not name %q on one line", err, tc.wantMsg)
			}
			if exitCode(err) != 2 {
				t.Errorf("exit code %d", exitCode(err))
			}
		})
	}
}

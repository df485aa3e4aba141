package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// envPrefix starts every environment variable that sets a flag.
const envPrefix = "FULFILLER_"

// envName is the environment variable for a flag: FULFILLER_MAX_PENDING for
// --max-pending.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyConfig fills every flag the user did not set on the command line,
// first from FULFILLER_* environment variables, then from the --config YAML
// file. Flags win over the environment, the environment over the file.
func applyConfig(cmd *cobra.Command) error {
	flags := cmd.Flags()
	path, _ := flags.GetString("config")
	if !flags.Changed("config") {
		if v, ok := os.LookupEnv(envName("config")); ok {
			path = v
		}
	}
	file, err := readConfigFile(path, knownFlags(cmd.Root()))
	if err != nil {
		return err
	}
	var errs []error
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := flags.Set(f.Name, v); err != nil {
				errs = append(errs, flagValueError(envName(f.Name), f, v, err))
			}
			setSource(f, sourceEnv)
			return
		}
		v, ok := file[f.Name]
		if !ok {
			return
		}
		for _, s := range configValues(v) {
			if err := flags.Set(f.Name, s); err != nil {
				errs = append(errs, flagValueError(fmt.Sprintf("config %s: key %s", path, f.Name), f, s, err))
				return
			}
		}
		setSource(f, sourceConfig)
	})
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// readConfigFile parses the YAML config. A key that is not the name of any
// flag of any subcommand is an error naming the key, so that a typo such as
// `max_pending` is never silently ignored. Keys of other subcommands are
// allowed: one file may serve `run` and `demo`.
func readConfigFile(path string, known map[string]bool) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fileError("config", err)
	}
	var doc map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, usageErrorf("config %s: %v", path, err)
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] || k == "config" {
			return nil, usageErrorf("config %s: unknown key %q (keys are flag names, e.g. max-pending)", path, k)
		}
	}
	return doc, nil
}

// configValues turns a YAML value into the strings pflag's Set takes: one
// per list element (repeatable flags append), otherwise one.
func configValues(v any) []string {
	switch x := v.(type) {
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			out = append(out, fmt.Sprint(e))
		}
		return out
	case nil:
		return nil
	default:
		return []string{fmt.Sprint(x)}
	}
}

// knownFlags collects the flag names of every command in the tree.
func knownFlags(root *cobra.Command) map[string]bool {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return known
}

// Where a flag's value came from, recorded by applyConfig in the flag's
// annotations: a changed flag without one was given on the command line.
const (
	sourceKey    = "fulfiller/source"
	sourceEnv    = "environment"
	sourceConfig = "config file"
)

func setSource(f *pflag.Flag, source string) {
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[sourceKey] = []string{source}
}

// flagSource says where the value of the flag came from: "command line",
// sourceEnv, sourceConfig, or "" when it has its default.
func flagSource(f *pflag.Flag) string {
	if s := f.Annotations[sourceKey]; len(s) > 0 {
		return s[0]
	}
	if f.Changed {
		return "command line"
	}
	return ""
}

// unknownEnv lists the FULFILLER_* environment variables that set no flag
// of any command, sorted: a misspelt variable is otherwise silently
// ignored, like a misspelt config key would be.
func unknownEnv(root *cobra.Command, environ []string) []string {
	known := knownFlags(root)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))
		if !known[flag] || envName(flag) != name {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

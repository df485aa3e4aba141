//go:build unix

package main

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// deployDir holds the deployment files operators copy (docs/operations.md).
var deployDir = filepath.Join("..", "..", "examples", "deploy")

// unitFile is a systemd unit as systemd reads it: sections of Key=value
// lines, a comment only on a line of its own.
type unitFile map[string][]string // "Section.Key" → values, in order

func parseUnit(t *testing.T, text string) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.HasSuffix(v, `\`) {
				t.Fatalf("unit line %q: not Key=value on one line", line)
			}
			u[section+"."+k] = append(u[section+"."+k], v)
		}
	}
	return u
}

// one is the single value of key.
func (u unitFile) one(t *testing.T, key string) string {
	t.Helper()
	if len(u[key]) != 1 {
		t.Fatalf("%s: %d values %q, want one", key, len(u[key]), u[key])
	}
	return u[key][0]
}

// rebase moves every absolute path under one of dirs into root, in s: the
// deployment's files live in a temporary directory in the test.
func rebase(s, root string, dirs []string) string {
	for _, d := range dirs {
		s = regexp.MustCompile(`(^|[\s"'=,\[])`+regexp.QuoteMeta(d)+`(/|$|[\s"',\]])`).ReplaceAllString(s, "${1}"+root+d+"${2}")
	}
	return s
}

// TestDeploySystemdUnit: examples/deploy/fulfiller.service passes
// `systemd-analyze verify` (in a root that has the unit, the binaries it
// names and the system's units, so that no PID 1 is needed), and the run
// it starts passes `fulfiller run --check` with the environment its
// EnvironmentFile= sets (examples/deploy/fulfiller.env), its config
// (examples/deploy/fulfiller.yaml) and the directories LogsDirectory= and
// StateDirectory= make. A value with a comment after it is what the
// verification is there to catch: the test shows that it does.
func TestDeploySystemdUnit(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(deployDir, "fulfiller.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := parseUnit(t, string(raw))
	start := strings.Fields(unit.one(t, "Service.ExecStart"))
	if pre := strings.Fields(unit.one(t, "Service.ExecStartPre")); !slices.Equal(pre, append(slices.Clone(start), "--check")) {
		t.Errorf("ExecStartPre %q is not ExecStart %q with --check", pre, start)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Missing(t, "systemd-analyze (Debian package systemd): %v", err)
		return
	}
	verify := func(text string) string {
		t.Helper()
		root := t.TempDir()
		units := ""
		for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				units = d
				break
			}
		}
		if units == "" {
			testenv.Missing(t, "the system's units (/usr/lib/systemd/system, Debian package systemd)")
		}
		if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", units, filepath.Join(root, "usr/lib/systemd/system")).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v\n%s", units, err, out)
		}
		write(t, filepath.Join(root, "etc/systemd/system/fulfiller.service"), text, 0o644)
		for _, key := range []string{"Service.ExecStartPre", "Service.ExecStart", "Service.ExecReload"} {
			for _, v := range unit[key] {
				write(t, filepath.Join(root, strings.Fields(v)[0]), "#!/bin/sh\n", 0o755)
			}
		}
		out, err := exec.Command(analyze, "verify", "--root="+root, "--man=no", "--generators=no", "fulfiller.service").CombinedOutput()
		if err != nil && len(out) == 0 {
			return err.Error()
		}
		return string(out)
	}
	if out := verify(string(raw)); out != "" {
		t.Errorf("systemd-analyze verify examples/deploy/fulfiller.service:\n%s", out)
	}
	commented := strings.Replace(string(raw), "LogsDirectory=fulfiller\n", "LogsDirectory=fulfiller   # /var/log/fulfiller\n", 1)
	if out := verify(commented); !strings.Contains(out, "LogsDirectory=") {
		t.Errorf("systemd-analyze verify passes a comment after a value: %q", out)
	}

	// The run the unit starts, in a root of its own.
	root := t.TempDir()
	dirs := []string{"/etc/fulfiller", "/var/log/fulfiller", "/var/lib/fulfiller"}
	policies, err := filepath.Abs(examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(root, "etc/fulfiller/policies"), os.DirFS(policies)); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(deployDir, "fulfiller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := rebase(start[3], root, dirs)
	write(t, cfgPath, rebase(string(config), root, dirs), 0o644)
	envText, err := os.ReadFile(filepath.Join(deployDir, "fulfiller.env"))
	if err != nil {
		t.Fatal(err)
	}
	envFile := rebase(unit.one(t, "Service.EnvironmentFile"), root, dirs)
	write(t, envFile, string(envText), 0o600)
	if d := unit.one(t, "Service.LogsDirectory"); !strings.Contains(string(config), "/var/log/"+d+"/") {
		t.Errorf("LogsDirectory=%s is not where fulfiller.yaml's decision log goes", d)
	}
	if d := unit.one(t, "Service.StateDirectory"); !strings.Contains(string(config), "state: /var/lib/"+d+"/") {
		t.Errorf("StateDirectory=%s is not where fulfiller.yaml's state goes", d)
	}
	for _, d := range []string{"var/log/fulfiller", "var/lib/fulfiller"} { // LogsDirectory=, StateDirectory=
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"FULFILLER_STATE": filepath.Join(root, "var/lib/fulfiller/state")} // as the config says (cliEnv would set its own)
	for _, line := range strings.Split(string(envText), "\n") {                                 // systemd's EnvironmentFile= syntax, as this file uses it
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("fulfiller.env line %q: not VARIABLE=value", line)
		}
		env[k] = v
	}
	if env["FULFILLER_TOKEN"] == "" || env["FULFILLER_HTTP_TOKEN"] == "" {
		t.Errorf("fulfiller.env sets no FULFILLER_TOKEN or FULFILLER_HTTP_TOKEN: %v", env)
	}
	args := rebase(strings.Join(append(start[1:], "--check"), " "), root, dirs)
	_, stderr, code := cliEnv(t, "", env, strings.Fields(args)...)
	if code != 0 || !strings.Contains(stderr, "configuration is valid") || strings.Contains(stderr, "WARN") {
		t.Errorf("the unit's run --check: exit %d, want 0 without warnings\n%s", code, stderr)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// mountAtomic lays files out in dir as the kubelet mounts a ConfigMap or
// a Secret: the files in a hidden timestamped directory, ..data a link
// to it, and each name a link through ..data (so that an update swaps
// them all at once).
func mountAtomic(t *testing.T, dir string, files map[string]string, mode os.FileMode) {
	t.Helper()
	const gen = "..2026_01_01_00_00_00.000000001"
	for name, content := range files {
		write(t, filepath.Join(dir, gen, name), content, mode)
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(gen, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// decodeStrict decodes a manifest into v, refusing fields v's type does
// not have (a misspelt or misplaced key) and duplicate keys.
func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) as the kubelet does, with the variables defined
// so far; an undefined one stays as written.
func expand(s string, vars map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// TestDeployKubernetes: each manifest of examples/deploy/kubernetes
// decodes strictly into its k8s.io/api type; the fulfiller container of
// each workload mounts only volumes the pod declares (or claims), its
// probes name its ops port, which is the port --http listens on; and the
// run it starts (its args and environment, with $(VAR) expanded as the
// kubelet does, pod 0's name, the ConfigMap's config, the policies
// ConfigMap as examples/policies and the Secret's files faked, all under a
// temporary root) passes `fulfiller run --check`.
func TestDeployKubernetes(t *testing.T) {
	var config corev1.ConfigMap
	decodeStrict(t, "configmap.yaml", &config)
	if config.Kind != "ConfigMap" || config.Data["fulfiller.yaml"] == "" {
		t.Fatalf("configmap.yaml: kind %q, keys %v", config.Kind, config.Data)
	}
	policies, err := filepath.Abs(examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"statefulset.yaml", "sidecar.yaml"} {
		t.Run(file, func(t *testing.T) {
			var sts appsv1.StatefulSet
			decodeStrict(t, file, &sts)
			if sts.Kind != "StatefulSet" || sts.APIVersion != "apps/v1" {
				t.Fatalf("kind %s/%s", sts.APIVersion, sts.Kind)
			}
			pod := sts.Spec.Template.Spec
			i := slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "fulfiller" })
			if i < 0 {
				t.Fatal("no container named fulfiller")
			}
			c := pod.Containers[i]
			volumes := map[string]corev1.VolumeSource{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v.VolumeSource
			}
			for _, pvc := range sts.Spec.VolumeClaimTemplates {
				volumes[pvc.Name] = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}
			}
			root := t.TempDir()
			var dirs []string
			for _, m := range c.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("volume mount %s at %s: the pod declares no such volume", m.Name, m.MountPath)
				}
				dirs = append(dirs, m.MountPath)
			}

			// The environment, in order, as the kubelet builds it.
			podName := sts.Name + "-0"
			vars := map[string]string{}
			env := map[string]string{}
			for _, e := range c.Env {
				v := expand(e.Value, vars)
				switch {
				case e.ValueFrom == nil:
				case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
					v = podName
				case e.ValueFrom.SecretKeyRef != nil:
					v = fakeSecret(e.ValueFrom.SecretKeyRef.Key)
				default:
					t.Fatalf("env %s: a valueFrom this test does not fake", e.Name)
				}
				vars[e.Name] = v
				if strings.HasPrefix(e.Name, envPrefix) {
					env[e.Name] = rebase(v, root, dirs)
				}
			}
			if _, ok := env[envName("state")]; !ok {
				env[envName("state")] = filepath.Join(root, "state") // the default is relative to the working directory
			}
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = rebase(expand(a, vars), root, dirs)
			}
			if len(args) == 0 || args[0] != "run" || len(c.Command) != 0 {
				t.Fatalf("command %q args %q: want the image's fulfiller with run", c.Command, c.Args)
			}

			// The mounted files.
			everything := strings.Join(append(slices.Clone(args), config.Data["fulfiller.yaml"]), " ")
			for _, v := range env {
				everything += " " + v
			}
			for _, m := range c.VolumeMounts {
				src, dir := volumes[m.Name], filepath.Join(root, m.MountPath)
				switch {
				case src.ConfigMap != nil && src.ConfigMap.Name == config.Name:
					files := map[string]string{}
					for k, v := range config.Data {
						files[k] = rebase(v, root, dirs)
					}
					mountAtomic(t, dir, files, 0o644)
				case src.ConfigMap != nil && src.ConfigMap.Name == "fulfiller-policies":
					// kubectl create configmap --from-file=examples/policies:
					// every file of the directory, a key each.
					entries, err := os.ReadDir(policies)
					if err != nil {
						t.Fatal(err)
					}
					files := map[string]string{}
					for _, e := range entries {
						raw, err := os.ReadFile(filepath.Join(policies, e.Name()))
						if err != nil {
							t.Fatal(err)
						}
						files[e.Name()] = string(raw)
					}
					mountAtomic(t, dir, files, 0o644)
				case src.Secret != nil:
					// Every file of it the run names: a token is one line.
					named := regexp.MustCompile(regexp.QuoteMeta(m.MountPath) + `/([^\s"',\]]+)`)
					files := map[string]string{}
					for _, f := range named.FindAllStringSubmatch(everything, -1) {
						files[f[1]] = fakeSecret(f[1]) + "\n"
					}
					mountAtomic(t, dir, files, 0o600)
				case src.PersistentVolumeClaim != nil || src.EmptyDir != nil:
					if err := os.MkdirAll(dir, 0o700); err != nil {
						t.Fatal(err)
					}
				default:
					t.Fatalf("volume %s: a source this test does not fake", m.Name)
				}
			}

			_, stderr, code := cliEnv(t, "", env, append(args, "--check")...)
			if code != 0 || !strings.Contains(stderr, "configuration is valid") || strings.Contains(stderr, "WARN") {
				t.Errorf("%s's fulfiller: run --check exit %d, want 0 without warnings\nargs %q\nenv %v\n%s", file, code, args, env, stderr)
			}

			// The probes reach the port --http listens on.
			var httpAddr string
			if y := regexp.MustCompile(`(?m)^http: (\S+)$`).FindStringSubmatch(config.Data["fulfiller.yaml"]); y != nil {
				httpAddr = y[1]
			}
			if v, ok := env[envName("http")]; ok {
				httpAddr = v
			}
			_, port, err := net.SplitHostPort(httpAddr)
			if err != nil {
				t.Fatalf("--http %q: %v", httpAddr, err)
			}
			pi := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "ops" })
			if pi < 0 || strconv.Itoa(int(c.Ports[pi].ContainerPort)) != port {
				t.Errorf("ports %v: want ops on %s, the --http port", c.Ports, port)
			}
			for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "ops" {
					t.Errorf("%s probe %v: want an httpGet on the ops port", name, p)
				}
			}
		})
	}
}

// TestDeployFilesInTheDocs: where docs/operations.md quotes a deployment
// file (the block under a line naming it as <!-- examples/deploy/FILE -->),
// the quote is the file, byte for byte: operators copy either.
func TestDeployFilesInTheDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile("(?s)<!-- (examples/deploy/[^ ]+) -->\n```[a-z]*\n(.*?)```\n").FindAllSubmatch(doc, -1)
	var names []string
	for _, q := range quoted {
		name := string(q[1])
		names = append(names, name)
		file, err := os.ReadFile(filepath.Join("..", "..", name))
		if err != nil {
			t.Errorf("docs/operations.md quotes %s: %v", name, err)
			continue
		}
		if !bytes.Equal(q[2], file) {
			t.Errorf("docs/operations.md's quote of %s differs from the file:\n%s", name, q[2])
		}
	}
	for _, want := range []string{"examples/deploy/fulfiller.service", "examples/deploy/fulfiller.env", "examples/deploy/kubernetes/sidecar.yaml", "examples/deploy/kubernetes/statefulset.yaml"} {
		if !slices.Contains(names, want) {
			t.Errorf("docs/operations.md does not quote %s (quoted: %v)", want, names)
		}
	}
}

// fakeSecret stands in for a Secret's key: as strong as the
// `openssl rand -base64 32` the manifests ask for, since run refuses a
// weak operator token on a listener others reach.
func fakeSecret(key string) string { return "secret-" + key + "-q0Jx3S9vLrT2mW8eYk4NcZ7hPu1AdG5f" }

// TestDeployInstallOrder (issue 42): docs/operations.md's systemd install
// block puts in place every file the unit's header says it expects
// (/usr/local/bin/fulfiller first of all) before it runs
// `systemd-analyze verify`, which fails while the ExecStart= program is
// missing; and it installs the unit TestDeploySystemdUnit verifies.
func TestDeployInstallOrder(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- install: systemd -->\n```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no <!-- install: systemd --> sh block")
	}
	lines := strings.Split(strings.TrimSpace(block), "\n")
	verify := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "systemd-analyze verify") })
	if verify < 0 {
		t.Fatalf("the install block never verifies the unit:\n%s", block)
	}
	unit, err := os.ReadFile(filepath.Join(deployDir, "fulfiller.service"))
	if err != nil {
		t.Fatal(err)
	}
	// The header's "Files this unit expects", and the unit itself.
	expected := []string{"/etc/systemd/system/fulfiller.service"}
	for _, m := range regexp.MustCompile(`(?m)^#\s+(/\S+?)/?\s{2,}`).FindAllStringSubmatch(string(unit), -1) {
		expected = append(expected, m[1])
	}
	if !slices.Contains(expected, "/usr/local/bin/fulfiller") || len(expected) < 5 {
		t.Fatalf("the unit's header names %q; want the binary, the config, the policies and the env file", expected)
	}
	for _, want := range expected {
		at := slices.IndexFunc(lines, func(l string) bool {
			f := strings.Fields(strings.SplitN(l, "#", 2)[0])
			return len(f) > 0 && f[len(f)-1] == want && (slices.Contains(f, "install") || slices.Contains(f, "cp"))
		})
		switch {
		case at < 0:
			t.Errorf("the install block does not install %s:\n%s", want, block)
		case at > verify:
			t.Errorf("the install block installs %s after systemd-analyze verify (line %d, verify on line %d)", want, at+1, verify+1)
		}
	}
}

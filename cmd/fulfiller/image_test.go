//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mewkit/fulfiller/internal/testenv"
)

// repoRoot is the module's root, where the Dockerfile and
// .goreleaser.yaml are.
var repoRoot = filepath.Join("..", "..")

// dockerStage is one FROM … stage of a Dockerfile: its base and its
// instructions (continuations joined), keyword upper-cased.
type dockerStage struct {
	from, name string
	lines      []string
}

func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatalf("the container image recipe: %v", err)
	}
	var stages []dockerStage
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(string(raw), "\\\n", " ")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		kw, rest, _ := strings.Cut(line, " ")
		kw = strings.ToUpper(kw)
		if kw == "FROM" {
			f := strings.Fields(rest)
			s := dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", line)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, kw+" "+strings.TrimSpace(rest))
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and the image", len(stages))
	}
	return stages
}

// instr is the argument of the last instruction kw of s ("" if none).
func (s dockerStage) instr(kw string) string {
	out := ""
	for _, l := range s.lines {
		if rest, ok := strings.CutPrefix(l, kw+" "); ok {
			out = rest
		}
	}
	return out
}

// TestContainerImage (issue 42): the Dockerfile the Kubernetes manifests'
// image is built with is a static binary on distroless static (or
// scratch), run as a user that is not root, the binary its entrypoint;
// its Go is at least go.mod's; and its build command, run here as the
// recipe writes it, makes a binary that needs no C library (no ELF
// interpreter) and prints the version it was given. Building the image
// itself is TestContainerImageBuilds.
func TestContainerImage(t *testing.T) {
	stages := parseDockerfile(t)
	build, image := stages[0], stages[len(stages)-1]

	if !strings.HasPrefix(image.from, "gcr.io/distroless/static") && image.from != "scratch" {
		t.Errorf("the image is FROM %s, want gcr.io/distroless/static… or scratch", image.from)
	}
	user := image.instr("USER")
	if uid, _, _ := strings.Cut(user, ":"); user == "" || uid == "0" || uid == "root" {
		t.Errorf("the image runs as %q, want a user that is not root", user)
	}
	if ep := image.instr("ENTRYPOINT"); ep != `["/usr/local/bin/fulfiller"]` {
		t.Errorf("ENTRYPOINT %s, want [\"/usr/local/bin/fulfiller\"] (the manifests give run's arguments)", ep)
	}
	if cp := image.instr("COPY"); cp != "--from="+build.name+" /out/fulfiller /usr/local/bin/fulfiller" {
		t.Errorf("COPY %s, want the build stage's /out/fulfiller at /usr/local/bin/fulfiller", cp)
	}

	// The builder's Go is at least go.mod's.
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`).FindStringSubmatch(string(mod))
	if want == nil {
		t.Fatal("go.mod has no go directive")
	}
	want = want[1:]
	m := regexp.MustCompile(`^golang:(\d+)\.(\d+)`).FindStringSubmatch(build.from)
	if m == nil || atoi(m[1])*1000+atoi(m[2]) < atoi(want[0])*1000+atoi(want[1]) {
		t.Errorf("the build stage is FROM %s, want golang:%s.%s or later (go.mod)", build.from, want[0], want[1])
	}

	var goBuild string
	for _, l := range build.lines {
		if rest, ok := strings.CutPrefix(l, "RUN "); ok && strings.Contains(rest, "go build") {
			goBuild = rest
		}
	}
	if !strings.HasPrefix(goBuild, "CGO_ENABLED=0 go build ") || !strings.HasSuffix(goBuild, " -o /out/fulfiller ./cmd/fulfiller") {
		t.Fatalf("the build stage's go build is %q, want CGO_ENABLED=0 go build … -o /out/fulfiller ./cmd/fulfiller", goBuild)
	}
	// Everything it compiles builds without cgo: the binary needs no C
	// library, which distroless static does not have. (Building it is
	// TestContainerImageBuilds': a -trimpath build here compiles the
	// whole tree again, minutes on a small machine.)
	list := exec.Command("go", "list", "-e", "-deps", "-f", `{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}{{if .CgoFiles}}{{.ImportPath}} uses cgo{{end}}`, "./cmd/fulfiller")
	list.Dir = repoRoot
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := list.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "" {
		t.Errorf("CGO_ENABLED=0 go list -deps ./cmd/fulfiller: %v\n%s", err, b)
	}
	// -X main.version= sets what --version prints.
	if src, err := os.ReadFile("version.go"); err != nil || !regexp.MustCompile(`(?m)^var version = ""$`).Match(src) {
		t.Errorf("the recipe sets -X main.version, and cmd/fulfiller/version.go has no var version string (%v)", err)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestContainerImageBuilds builds the Dockerfile with docker where a
// daemon answers, and runs the image: `--version` works, as the non-root
// user. Without docker, or with a docker client whose daemon does not
// answer (as on a machine with only the CLI), the test says which and is
// skipped, or fails under CI (internal/testenv). With -short (CI's
// run) it is not tried, and says so: CI's machines have a docker client
// and no daemon, and TestContainerImage checks the recipe there.
func TestContainerImageBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: building the image needs a Docker daemon and minutes; TestContainerImage checks the recipe, and go test without -short builds it where a daemon answers")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		testenv.Missing(t, "no container builder: docker is not on the PATH (%v); install Docker to build the Dockerfile", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, docker, "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		testenv.Missing(t, "no container builder: %s is installed but no Docker daemon answers (%s); start dockerd or set DOCKER_HOST to build the Dockerfile",
			docker, strings.TrimSpace(lastLine(string(b))))
		return
	}
	tag := fmt.Sprintf("fulfiller-image-test:%d", os.Getpid())
	run := func(args ...string) string {
		t.Helper()
		b, err := exec.CommandContext(ctx, docker, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	run("build", "--build-arg", "VERSION=v0.0.0-image-test", "-t", tag, repoRoot)
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
	if out := run("run", "--rm", tag, "--version"); !strings.HasPrefix(out, "fulfiller v0.0.0-image-test ") {
		t.Errorf("the image's --version: %q", out)
	}
	var cfg []struct{ Config struct{ User string } }
	if err := json.Unmarshal([]byte(run("image", "inspect", tag)), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("docker image inspect: %v", err)
	}
	if u := cfg[0].Config.User; u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
		t.Errorf("the image runs as %q, want a user that is not root", u)
	}
}

// goreleaserVersion is the goreleaser `go install`ed when none is on the
// PATH: the last release that builds with go.mod's Go (v2.18 needs 1.27).
const goreleaserVersion = "v2.17.0"

// TestGoreleaserConfig (issue 42): .goreleaser.yaml, which describes the
// release archives, is what goreleaser accepts (`goreleaser check`), and
// what it names exists: the main package, the variable -X sets, each
// platform (`go tool dist list`) and a file for each archive pattern. The
// second part runs everywhere; goreleaser itself is taken from the PATH,
// or installed with `go install` into the user's cache when the tests
// run without -short (it compiles for minutes: -short says so and checks
// only the second part).
func TestGoreleaserConfig(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Version int `json:"version"`
		Builds  []struct {
			Main    string   `json:"main"`
			Env     []string `json:"env"`
			Ldflags []string `json:"ldflags"`
			Goos    []string `json:"goos"`
			Goarch  []string `json:"goarch"`
		} `json:"builds"`
		Archives []struct {
			Files []string `json:"files"`
		} `json:"archives"`
	}
	// Keys this test does not read are goreleaser's to check.
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if cfg.Version != 2 || len(cfg.Builds) == 0 || len(cfg.Archives) == 0 {
		t.Fatalf(".goreleaser.yaml: version %d, %d builds, %d archives; want version 2 with builds and archives", cfg.Version, len(cfg.Builds), len(cfg.Archives))
	}
	dist, err := exec.Command("go", "tool", "dist", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cfg.Builds {
		if b.Main != "./cmd/fulfiller" || !slices.Contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build of %s with env %q, want ./cmd/fulfiller with CGO_ENABLED=0 (static, as the image)", b.Main, b.Env)
		}
		if !strings.Contains(strings.Join(b.Ldflags, " "), "-X main.version=") {
			t.Errorf("ldflags %q do not set main.version (--version)", b.Ldflags)
		}
		for _, goos := range b.Goos {
			for _, goarch := range b.Goarch {
				if !slices.Contains(strings.Fields(string(dist)), goos+"/"+goarch) {
					t.Errorf("platform %s/%s is not in go tool dist list", goos, goarch)
				}
			}
		}
	}
	for _, a := range cfg.Archives {
		for _, pattern := range a.Files {
			matches, _ := filepath.Glob(filepath.Join(repoRoot, strings.ReplaceAll(pattern, "**/", "*/")))
			if len(matches) == 0 {
				t.Errorf("archive files %q match nothing", pattern)
			}
		}
	}

	bin, err := exec.LookPath("goreleaser")
	if err != nil {
		if testing.Short() {
			t.Logf("-short: goreleaser is not on the PATH and is not installed (go install github.com/goreleaser/goreleaser/v2@%s takes minutes); only the file's contents were checked", goreleaserVersion)
			return
		}
		bin = installGoreleaser(t)
	}
	cmd := exec.Command(bin, "check")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("goreleaser check: %v\n%s", err, b)
	}
}

// installGoreleaser installs goreleaserVersion into the user's cache
// (once: later runs find it there) and returns its path.
func installGoreleaser(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		testenv.Missing(t, "goreleaser: not on the PATH, and no cache directory to install it in (%v)", err)
	}
	gobin := filepath.Join(cache, "fulfiller-test-tools", "goreleaser-"+goreleaserVersion)
	bin := filepath.Join(gobin, "goreleaser")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/goreleaser/goreleaser/v2@"+goreleaserVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		testenv.Missing(t, "goreleaser: not on the PATH, and go install github.com/goreleaser/goreleaser/v2@%s failed: %v\n%s", goreleaserVersion, err, b)
	}
	return bin
}

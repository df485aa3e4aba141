package doclinks

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRepositoryDocs checks the repository itself: every relative link in
// every Markdown file resolves (file and #anchor), every docs/… reference
// and "docs/design.md rule N" in the sources exists, and nothing refers to
// the developers' brief outside the repository.
func TestRepositoryDocs(t *testing.T) {
	rep, err := Check(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	// A walk that found nothing would pass: the repository has a README,
	// docs/ and examples, and links among them.
	if rep.Markdown < 10 || rep.Links < 100 {
		t.Errorf("checked %d Markdown files and %d links: the walk missed the repository", rep.Markdown, rep.Links)
	}
}

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Matching an answer to its request":                         "matching-an-answer-to-its-request",
		"Pending work and the state store (`--state`)":              "pending-work-and-the-state-store---state",
		"The proposer's own deadline":                               "the-proposers-own-deadline",
		"Grants: approvals that teach":                              "grants-approvals-that-teach",
		"Policy bundles (`--policy bundle.tar.gz`, `--bundle-url`)": "policy-bundles---policy-bundletargz---bundle-url",
		"Results (2026-11-23, Go 1.26.8)":                           "results-2026-11-23-go-1268",
		"snake_case and [a link](x.md)":                             "snake_case-and-a-link",
		"Écrire une politique":                                      "écrire-une-politique",
	} {
		if got := Slug(text); got != want {
			t.Errorf("Slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestCheckFindsEveryKindOfBrokenReference runs Check on a small tree and
// expects exactly the broken references it holds, at their lines.
func TestCheckFindsEveryKindOfBrokenReference(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n"+
		"[ok](docs/guide.md) [ok anchor](docs/guide.md#second-part) [dir](docs)\n"+
		"[missing](docs/nope.md)\n"+
		"[bad anchor](docs/guide.md#third-part)\n"+
		"[self](#top) [bad self](#bottom) ![image](docs/missing.png)\n"+
		"[web](https://example.com/x.md#y) `[code](docs/nope.md)`\n"+
		"```\n[fenced](docs/nope.md)\n```\n"+
		"[wrapped\ntext](docs/guide.md#nowhere)\n"+
		"[ref]: docs/gone.md\n"+
		"[up](../elsewhere.md)\n")
	write("docs/guide.md", "# Guide\n## Second part\n## Second part\n"+
		"[repeat](#second-part-1) [code line](../main.go#L3) [code word](../main.go#main)\n"+
		"[brief](../../"+"shared/DESIGN.md)\n")
	write("docs/design.md", "# Design\n## Rules\n1. **One.** a\n2. **Two.** b\n")
	write("main.go", "package main\n\n// See docs/guide.md#second-part and docs/design.md rule 2.\n"+
		"// Also docs/design.md rule 3, docs/guide.md#gone and docs/missing.md.\nfunc main() {}\n")

	rep, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:3: docs/nope.md: no such file: docs/nope.md",
		"README.md:4: docs/guide.md#third-part: no heading #third-part in docs/guide.md",
		"README.md:5: #bottom: no heading #bottom in README.md",
		"README.md:5: docs/missing.png: no such file: docs/missing.png",
		"README.md:10: docs/guide.md#nowhere: no heading #nowhere in docs/guide.md",
		"README.md:12: docs/gone.md: no such file: docs/gone.md",
		"README.md:13: ../elsewhere.md: leads outside the repository",
		"docs/guide.md:4: ../main.go#main: an anchor into a file that is not Markdown",
		"docs/guide.md:5: ../../" + "shared/DESIGN.md: leads outside the repository",
		"docs/guide.md:5: ../" + "shared: refers outside the repository: a clone does not have it",
		"main.go:4: docs/design.md rule 3: docs/design.md has no rule 3",
		"main.go:4: docs/guide.md#gone: no heading #gone in docs/guide.md",
		"main.go:4: docs/missing.md: no such file: docs/missing.md",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", join(got), join(want))
	}
	if rep.Markdown != 3 {
		t.Errorf("read %d Markdown files, want 3", rep.Markdown)
	}
}

func join(lines []string) string {
	s := ""
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

// Package doclinks checks the repository's documentation the way a reader
// meets it on GitHub: every relative link in a Markdown file leads to a file
// that exists, every #anchor to a heading of its target, and nothing points
// outside the repository. A clone must hold every document it names.
package doclinks

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Problem is one broken reference, at the line that holds it.
type Problem struct {
	File string // slash-separated, relative to the root that was checked
	Line int
	Link string // the reference as written
	Msg  string
}

// String is "file:line: link: what is wrong", as compilers print errors.
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Link, p.Msg)
}

// Report is what a check of a tree found.
type Report struct {
	Markdown int // Markdown files read
	Links    int // relative links and source references checked
	Problems []Problem
}

// outsidePaths are references to the developers' brief beside the
// repository, which a clone does not have. Written in pieces so that this
// file does not hold them.
var outsidePaths = []string{".." + "/shared", "shared" + "/conformance"}

// selfDir is this package, whose sources name documents only as examples.
const selfDir = "internal/doclinks/"

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef is a reference definition: [label]: target.
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?$`)
	// codeSpan is inline code, where brackets are not links.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	// docRef is a document of the repository named in source code or
	// configuration: docs/NAME.md, optionally with an anchor, or the
	// recordings' README.
	docRef = regexp.MustCompile(`\b((?:docs/[A-Za-z0-9_.-]+\.md|testdata/conformance/mew-v0\.4/README\.md)(?:#[A-Za-z0-9_-]+)?)`)
	// ruleRef is "docs/design.md rule N".
	ruleRef = regexp.MustCompile(`docs/design\.md\s+rule\s+(\d+)`)
	// ruleItem is a numbered rule in design.md: "N. **Title.**".
	ruleItem = regexp.MustCompile(`^(\d+)\.\s+\*\*`)
	// stripInline removes the Markdown of a heading's text before slugging:
	// links keep their text, images and HTML tags go.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag  = regexp.MustCompile(`<[^>]+>`)
	// lineAnchor is GitHub's anchor of a line (range) in a source file.
	lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// Slug is the anchor GitHub gives a heading: the text lowercased, every
// character that is not a letter, digit, space, hyphen or underscore
// dropped, and each space turned into a hyphen. "Pending work (`--state`)"
// becomes "pending-work---state".
func Slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// doc is what a Markdown file offers as link targets, and the links it
// holds.
type doc struct {
	anchors map[string]bool
	links   []ref
}

type ref struct {
	line   int
	target string
}

// parse reads a Markdown file: its headings' anchors (a repeated heading
// gets -1, -2, … as on GitHub) and the links outside code. A link's text
// may wrap over lines; its line is the one where the link starts.
func parse(text string) doc {
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := ""
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case inFence == m[1]:
				inFence = ""
			}
			lines[i] = ""
			continue
		}
		if inFence != "" {
			lines[i] = "" // code: neither headings nor links
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := Slug(m[2])
			if k := seen[s]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				d.anchors[s] = true
			}
			seen[s]++
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			d.links = append(d.links, ref{i + 1, m[1]})
			lines[i] = ""
		}
	}
	// Code spans become blanks of the same length (newlines kept), so that
	// offsets still give line numbers.
	masked := codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(code string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, code)
	})
	for _, m := range inlineLink.FindAllStringSubmatchIndex(masked, -1) {
		line := 1 + strings.Count(masked[:m[0]], "\n")
		d.links = append(d.links, ref{line, masked[m[2]:m[3]]})
	}
	slices.SortStableFunc(d.links, func(a, b ref) int { return a.line - b.line })
	return d
}

// external reports whether a link leaves the repository on purpose (a URL).
func external(target string) bool {
	u, err := url.Parse(target)
	return err == nil && u.Scheme != ""
}

// Check checks every Markdown file under root (but not under .git): each
// relative link must name an existing file or directory, and an #anchor a
// heading of the Markdown file it names (a line anchor #L12 of another
// file is taken as it is). It also reads the Go, Rego and YAML files: a
// docs/NAME.md[#anchor] they name must exist, "docs/design.md rule N" must
// be a numbered rule there, and no file refers to the developers' brief
// outside the repository.
func Check(root string) (Report, error) {
	var rep Report
	docs := map[string]doc{}
	var sources []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if e.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch path.Ext(rel) {
		case ".md":
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			docs[rel] = parse(string(b))
			sources = append(sources, rel)
		case ".go", ".rego", ".yaml", ".yml":
			sources = append(sources, rel)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("walk %s: %w", root, err)
	}
	rep.Markdown = len(docs)

	anchorsOf := func(target string) (map[string]bool, error) {
		if d, ok := docs[target]; ok {
			return d.anchors, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			return nil, err
		}
		return parse(string(b)).anchors, nil
	}
	// resolve checks target (slash-separated, relative to root) and its
	// anchor; it returns what is wrong, or "".
	resolve := func(target, anchor string) string {
		if target == ".." || strings.HasPrefix(target, "../") {
			return "leads outside the repository"
		}
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			return "no such file: " + target
		}
		if anchor == "" {
			return ""
		}
		if info.IsDir() {
			return "an anchor on a directory"
		}
		if path.Ext(target) != ".md" {
			if lineAnchor.MatchString(anchor) {
				return ""
			}
			return "an anchor into a file that is not Markdown"
		}
		anchors, err := anchorsOf(target)
		if err != nil {
			return err.Error()
		}
		if !anchors[anchor] {
			return fmt.Sprintf("no heading #%s in %s", anchor, target)
		}
		return ""
	}

	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range docs {
			if !yield(n) {
				return
			}
		}
	}) {
		for _, l := range docs[name].links {
			if external(l.target) {
				continue
			}
			rep.Links++
			target, anchor, _ := strings.Cut(l.target, "#")
			if t, err := url.PathUnescape(target); err == nil {
				target = t
			}
			if target == "" {
				target = name
			} else {
				target = path.Clean(path.Join(path.Dir(name), target))
			}
			if msg := resolve(target, anchor); msg != "" {
				rep.Problems = append(rep.Problems, Problem{name, l.line, l.target, msg})
			}
		}
	}

	rules := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, "docs", "design.md")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if m := ruleItem.FindStringSubmatch(line); m != nil {
				rules[m[1]] = true
			}
		}
	}
	slices.Sort(sources)
	for _, name := range sources {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return rep, fmt.Errorf("read %s: %w", name, err)
		}
		isMarkdown := path.Ext(name) == ".md"
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range outsidePaths {
				if strings.Contains(line, bad) {
					rep.Problems = append(rep.Problems, Problem{name, i + 1, bad, "refers outside the repository: a clone does not have it"})
				}
			}
			if isMarkdown || strings.HasPrefix(name, selfDir) {
				continue // links were checked above; this package's own examples are not references
			}
			// The literals every match holds, looked for first: the
			// regexps are most of the check's time on lines that have none.
			if !strings.Contains(line, "docs/") && !strings.Contains(line, "testdata/conformance/") {
				continue
			}
			for _, m := range docRef.FindAllStringSubmatch(line, -1) {
				rep.Links++
				target, anchor, _ := strings.Cut(m[1], "#")
				if msg := resolve(target, anchor); msg != "" {
					rep.Problems = append(rep.Problems, Problem{name, i + 1, m[1], msg})
				}
			}
			for _, m := range ruleRef.FindAllStringSubmatch(line, -1) {
				rep.Links++
				if !rules[m[1]] {
					rep.Problems = append(rep.Problems, Problem{name, i + 1, m[0], "docs/design.md has no rule " + m[1]})
				}
			}
		}
	}
	return rep, nil
}

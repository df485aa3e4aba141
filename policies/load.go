package policies

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown/print"
	"github.com/open-policy-agent/opa/v1/util"
)

// Query is the rule every policy set is asked for.
const Query = "data.fulfiller.decision"

// defaultPolicy is what runs without --policy: reject everything.
//
//go:embed default.rego
var defaultPolicy []byte

// DefaultPolicyFile is the name the embedded default policy goes by in
// errors and traces.
const DefaultPolicyFile = "(embedded)/default.rego"

var parserOptions = ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true}

// policySet is one compiled generation of policies and data. It is
// immutable once built; reloading builds a new one and swaps the pointer.
type policySet struct {
	query     rego.PreparedEvalQuery
	data      *dataCache // the data documents evaluations have read
	revision  string
	files     []string // every file read, policies first
	isDefault bool
	need      fieldSet // the input fields the policies can read
	// missing are the data documents the policies read that no data
	// file provides (missingData).
	missing []string
}

// LoadError is a policy or data file that cannot be used, with the line
// where that is known (Rego parse and compile errors).
type LoadError struct {
	File string
	Line int // 0 when unknown
	Err  error
	More int // further errors of the same load, not shown by Error
	// Rego is every Rego parse or compile error of the load in the order
	// OPA reports them, the first being the one File, Line and Err
	// describe; nil when the problem is not a Rego error. Each carries the
	// offending source line where it is known (see Pretty).
	Rego ast.Errors
	// Other holds the load's further errors that are not Rego errors
	// (opa test's loader reports them mixed).
	Other []error
}

// Error reads "file:line: problem", the form editors and CI annotate.
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.More > 0 {
		fmt.Fprintf(&b, " (and %d more errors)", e.More)
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *LoadError) Unwrap() error { return e.Err }

// source is one file's bytes as read for a load.
type source struct {
	path string
	data []byte
	// prefix is where a data document is mounted under data: the
	// subdirectory it was found in, like opa's loader does.
	prefix []string
}

// buildSet reads, parses and compiles everything opts names, with remote,
// the last good downloaded bundle (nil without --bundle-url). It has no
// side effects, so that a reload can build a new set next to the running
// one and throw it away if it does not compile.
func buildSet(ctx context.Context, opts *Options, hook print.Hook, remote *loadedBundle) (*policySet, error) {
	var regos []source
	var bundles []*loadedBundle
	isDefault := len(opts.Policies) == 0 && remote == nil
	if isDefault {
		regos = []source{{path: DefaultPolicyFile, data: defaultPolicy}}
	} else {
		var err error
		if regos, bundles, err = readPolicies(opts.Policies, opts); err != nil {
			return nil, err
		}
		if remote != nil {
			bundles = append(bundles, remote)
		}
	}
	datas, err := readData(opts.Data)
	if err != nil {
		return nil, err
	}

	// Every file is parsed before giving up, so that one run shows every
	// parse error, as opa check does.
	all := slices.Clone(regos)
	for _, b := range bundles {
		all = append(all, b.modules...)
	}
	modules := make([]*ast.Module, 0, len(all))
	var parseErrs ast.Errors
	for _, src := range all {
		m, err := ast.ParseModuleWithOpts(src.path, string(src.data), parserOptions)
		var errs ast.Errors
		switch {
		case err == nil:
			modules = append(modules, m)
		case errors.As(err, &errs):
			parseErrs = append(parseErrs, inFile(errs, src.path)...)
		default:
			return nil, regoError(src.path, err, all)
		}
	}
	if len(parseErrs) > 0 {
		return nil, regoError("", parseErrs, all)
	}
	data, owner, err := mergeData(datas)
	if err != nil {
		return nil, err
	}
	if len(bundles) > 0 {
		if err := checkOwnership(bundles, regos, modules[:len(regos)], data, owner); err != nil {
			return nil, err
		}
		// A bundle's data is the policy's data beside --data: inside its
		// roots only (checked by OPA's reader), where nothing else may
		// write (checked above), so merging cannot clash.
		for _, b := range bundles {
			if err := mergeInto(data, b.data, "data", b.name, owner); err != nil {
				return nil, err
			}
		}
	}

	var compiler *ast.Compiler
	args := []func(*rego.Rego){
		rego.Query(Query),
		rego.Store(inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))),
		rego.SetRegoVersion(ast.RegoV1),
		rego.EnablePrintStatements(true),
		rego.PrintHook(hook),
		// Hand back the result term itself: decisions are read straight
		// from the AST, which saves converting them to map[string]any.
		rego.GenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }),
		// Every compile error at once, not OPA's first ten; the compiler
		// is kept for its compiled modules (missingData).
		rego.CompilerHook(func(c *ast.Compiler) { c.SetErrorLimit(0); compiler = c }),
	}
	for _, m := range modules {
		args = append(args, rego.ParsedModule(m))
	}
	pq, err := rego.New(args...).PrepareForEval(ctx)
	if err != nil {
		return nil, regoError("", err, all)
	}

	set := &policySet{query: pq, data: newDataCache(), isDefault: isDefault, need: inputFields(modules)}
	if compiler != nil {
		set.missing = missingData(compiler.Modules, data)
	}
	for _, src := range regos {
		if !isDefault {
			set.files = append(set.files, src.path)
		}
	}
	for _, b := range bundles {
		set.files = append(set.files, b.name)
	}
	for _, src := range datas {
		set.files = append(set.files, src.path)
	}
	set.revision = setRevision(regos, datas, bundles)
	return set, nil
}

// setRevision is the revision decisions carry: a content hash of the files
// (see revision) and each bundle's manifest revision, joined by "+" when
// there are several, so that a set that is one bundle reports exactly the
// revision `opa build --revision` gave it.
func setRevision(regos, datas []source, bundles []*loadedBundle) string {
	var parts []string
	for _, b := range bundles {
		parts = append(parts, b.revision)
	}
	if len(regos) > 0 || len(datas) > 0 || len(bundles) == 0 {
		parts = append(parts, revision(regos, datas))
	}
	return strings.Join(parts, "+")
}

// regoError turns parse and compile errors into a LoadError naming the
// first error's file and line and keeping all of them, with their source
// lines from srcs (or from disk, for files srcs does not hold), for Pretty.
func regoError(file string, err error, srcs []source) error {
	var errs ast.Errors
	if errors.As(err, &errs) && len(errs) > 0 {
		first := errs[0]
		le := &LoadError{File: file, Err: fmt.Errorf("%s: %s", first.Code, first.Message), More: len(errs) - 1, Rego: errs}
		if first.Location != nil {
			if first.Location.File != "" {
				le.File = first.Location.File
			}
			le.Line = first.Location.Row
		}
		if le.File == "" {
			le.File = "policy"
		}
		withSourceLines(errs, srcs)
		return le
	}
	if file == "" {
		return fmt.Errorf("compile policy: %w", err)
	}
	return &LoadError{File: file, Err: err}
}

// readPolicies reads the .rego files and OPA bundles named by paths.
// Directories are walked recursively; *_test.rego files are for `fulfiller
// test` only and hidden files and directories (editor droppings, .git) are
// skipped there. A test file named on its own is an error rather than
// silently nothing.
func readPolicies(paths []string, opts *Options) ([]source, []*loadedBundle, error) {
	var out []source
	var bundles []*loadedBundle
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, nil, &LoadError{File: root, Err: unwrapPathError(err)}
		}
		if !info.IsDir() && isBundle(root) {
			b, err := readBundleFile(root, opts)
			if err != nil {
				return nil, nil, err
			}
			bundles = append(bundles, b)
			continue
		}
		if !info.IsDir() {
			if filepath.Ext(root) != ".rego" {
				return nil, nil, &LoadError{File: root, Err: errors.New("not a .rego file or a .tar.gz bundle (data documents go in --data)")}
			}
			if isTestFile(root) {
				return nil, nil, &LoadError{File: root, Err: errors.New("a test file is for `fulfiller test`, not for evaluation")}
			}
			data, err := os.ReadFile(root)
			if err != nil {
				return nil, nil, &LoadError{File: root, Err: unwrapPathError(err)}
			}
			out = append(out, source{path: root, data: data})
			continue
		}
		found := 0
		err = walkSources(root, func(path string) bool {
			return filepath.Ext(path) == ".rego" && !isTestFile(path)
		}, func(src source) {
			out = append(out, src)
			found++
		})
		if err != nil {
			return nil, nil, err
		}
		if found == 0 {
			return nil, nil, &LoadError{File: root, Err: errors.New("no .rego policy files in this directory")}
		}
	}
	return dedupe(out), bundles, nil
}

// readData reads JSON and YAML documents. A file is merged at the root of
// data; files found under a directory are mounted at their subdirectory's
// path, as opa's loader does, so `opa eval -d DIR` sees the same data.
func readData(paths []string) ([]source, error) {
	var out []source
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, &LoadError{File: root, Err: unwrapPathError(err)}
		}
		if !info.IsDir() {
			if !isDataFile(root) {
				return nil, &LoadError{File: root, Err: errors.New("not a data document (want .json, .yaml or .yml)")}
			}
			data, err := os.ReadFile(root)
			if err != nil {
				return nil, &LoadError{File: root, Err: unwrapPathError(err)}
			}
			out = append(out, source{path: root, data: data})
			continue
		}
		err = walkSources(root, isDataFile, func(src source) {
			rel, _ := filepath.Rel(root, filepath.Dir(src.path))
			if rel != "." {
				src.prefix = strings.Split(filepath.ToSlash(rel), "/")
			}
			out = append(out, src)
		})
		if err != nil {
			return nil, err
		}
	}
	return dedupe(out), nil
}

// walkSources reads every file under root that want accepts, skipping
// hidden files and directories (editor droppings, .git), and hands each to
// add in lexical order.
func walkSources(root string, want func(path string) bool, add func(source)) error {
	root = walkRoot(root)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return &LoadError{File: path, Err: unwrapPathError(err)}
		}
		if path != root && isHidden(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !want(path) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return &LoadError{File: path, Err: unwrapPathError(err)}
		}
		add(source{path: path, data: data})
		return nil
	})
}

// walkRoot is root as filepath.WalkDir must be given it. A root that is a
// symlink to a directory (a "current" link a deploy swaps, a mounted
// volume) is walked through the link: WalkDir does not follow a symlinked
// root, and --policy current loaded nothing. The paths found are still
// named under root.
func walkRoot(root string) string {
	if fi, err := os.Lstat(root); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return root
	}
	if st, err := os.Stat(root); err == nil && st.IsDir() {
		return filepath.Clean(root) + string(filepath.Separator)
	}
	return root
}

// dedupe drops a file named twice (say, by a directory and by name), which
// would otherwise define every rule twice.
func dedupe(srcs []source) []source {
	seen := map[string]bool{}
	return slices.DeleteFunc(srcs, func(s source) bool {
		key := filepath.Clean(s.path) + "\x00" + strings.Join(s.prefix, "/")
		if seen[key] {
			return true
		}
		seen[key] = true
		return false
	})
}

func isTestFile(path string) bool { return strings.HasSuffix(path, "_test.rego") }

func isHidden(name string) bool { return strings.HasPrefix(name, ".") }

func isDataFile(path string) bool {
	switch filepath.Ext(path) {
	case ".json", ".yaml", ".yml":
		return true
	}
	return false
}

// unwrapPathError keeps messages to "file: no such file or directory"
// rather than repeating the path the LoadError already names.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// mergeData parses every data document and deep-merges them into one
// object. Two files that set the same leaf are an error naming both, rather
// than one silently winning.
func mergeData(srcs []source) (data map[string]any, owner map[string]string, err error) {
	data = map[string]any{}
	owner = map[string]string{} // top-level path of each leaf → file, for messages
	for _, src := range srcs {
		doc, err := parseDataFile(src)
		if err != nil {
			return nil, nil, err
		}
		for i := len(src.prefix) - 1; i >= 0; i-- {
			doc = map[string]any{src.prefix[i]: doc}
		}
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil, nil, &LoadError{File: src.path, Err: errors.New("a data document must be a JSON/YAML object at its top level")}
		}
		if err := mergeInto(data, obj, "data", src.path, owner); err != nil {
			return nil, nil, err
		}
	}
	return data, owner, nil
}

func parseDataFile(src source) (any, error) {
	var doc any
	if filepath.Ext(src.path) == ".json" {
		if err := util.UnmarshalJSON(src.data, &doc); err != nil {
			return nil, &LoadError{File: src.path, Line: jsonErrorLine(src.data, err), Err: err}
		}
		return doc, nil
	}
	// util.Unmarshal is what opa itself uses for YAML, so the same file
	// means the same data under opa test and fulfiller.
	if len(bytes.TrimSpace(src.data)) == 0 {
		return map[string]any{}, nil
	}
	if err := util.Unmarshal(src.data, &doc); err != nil {
		return nil, &LoadError{File: src.path, Err: err}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	return doc, nil
}

func jsonErrorLine(data []byte, err error) int {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return lineAt(data, int(se.Offset))
	}
	return 0
}

func mergeInto(dst, src map[string]any, path, file string, owner map[string]string) error {
	for k, v := range src {
		p := path + "." + k
		old, exists := dst[k]
		if !exists {
			dst[k] = v
			owner[p] = file
			continue
		}
		oldObj, ok1 := old.(map[string]any)
		newObj, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return &LoadError{File: file, Err: fmt.Errorf("%s is also set by %s", p, ownerOf(owner, p))}
		}
		if err := mergeInto(oldObj, newObj, p, file, owner); err != nil {
			return err
		}
	}
	return nil
}

// ownerOf names the file that set p or the nearest object above it.
func ownerOf(owner map[string]string, p string) string {
	for {
		if f, ok := owner[p]; ok {
			return f
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return "another data file"
		}
		p = p[:i]
	}
}

// revision is a content hash of a policy set. It depends on what the files
// say (and where data is mounted), not on their names or order, so the same
// policies give the same revision on every machine.
func revision(regos, datas []source) string {
	var entries []string
	for _, s := range regos {
		sum := sha256.Sum256(s.data)
		entries = append(entries, "rego\x00"+hex.EncodeToString(sum[:]))
	}
	for _, s := range datas {
		sum := sha256.Sum256(s.data)
		entries = append(entries, "data\x00"+strings.Join(s.prefix, "/")+"\x00"+hex.EncodeToString(sum[:]))
	}
	slices.Sort(entries)
	h := sha256.New()
	for _, e := range entries {
		h.Write([]byte(e))
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:16]
}

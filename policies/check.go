package policies

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// CheckOptions configure Check.
type CheckOptions struct {
	// Strict compiles with OPA's strict mode (opa check --strict: unused
	// variables, imports and function arguments, deprecated built-ins,
	// and the like are errors) and makes contract warnings errors.
	Strict bool
}

// CheckReport is what Check found.
type CheckReport struct {
	// Problems is every parse, compile and contract error, in file and
	// line order, as a *LoadError (see LoadError.Pretty); nil when none.
	Problems error
	// Warnings are contract findings that do not fail the check (unknown
	// decision keys without Strict), each rendered as Pretty renders an
	// error.
	Warnings []string
	// Files is how many .rego files were checked.
	Files int
}

// Check parses and compiles every .rego file under paths, test files
// included, the way opa check does (every error, no limit), and checks the
// decisions the policies write down against fulfiller's contract (see
// contractProblems; test files are not held to it, they may build broken
// decisions on purpose). The error is for paths that cannot be read; what
// is wrong with the policies is in the report.
func Check(_ context.Context, paths []string, opts CheckOptions) (CheckReport, error) {
	if len(paths) == 0 {
		return CheckReport{}, errors.New("no policy paths given")
	}
	srcs, err := readRegoFiles(paths)
	if err != nil {
		return CheckReport{}, err
	}
	report := CheckReport{Files: len(srcs)}

	var problems, warnings ast.Errors
	modules := make(map[string]*ast.Module, len(srcs))
	for _, src := range srcs {
		m, err := ast.ParseModuleWithOpts(src.path, string(src.data), parserOptions)
		var errs ast.Errors
		switch {
		case err == nil:
			modules[src.path] = m
		case errors.As(err, &errs):
			problems = append(problems, inFile(errs, src.path)...)
		default:
			return CheckReport{}, &LoadError{File: src.path, Err: err}
		}
	}
	// Compiling needs every module; with a parse error opa check stops
	// there too. The contract checks need only the module itself.
	if len(problems) == 0 {
		c := ast.NewCompiler().
			SetErrorLimit(0).
			WithCapabilities(ast.CapabilitiesForThisVersion()).
			WithEnablePrintStatements(true).
			WithStrict(opts.Strict).
			WithUseTypeCheckAnnotations(true)
		if c.Compile(modules); c.Failed() {
			problems = append(problems, c.Errors...)
		}
	}
	for path, m := range modules {
		if isTestFile(path) {
			continue
		}
		errs, warns := contractProblems(m, opts.Strict)
		problems = append(problems, errs...)
		warnings = append(warnings, warns...)
	}
	sortErrors(problems)
	sortErrors(warnings)
	if len(problems) > 0 {
		report.Problems = regoError("", problems, srcs)
	}
	if len(warnings) > 0 {
		withSourceLines(warnings, srcs)
		for _, w := range warnings {
			report.Warnings = append(report.Warnings, prettyError(w, "policy"))
		}
	}
	return report, nil
}

// sortErrors orders errors by file, line and column, so that the output
// reads top to bottom and is the same on every run.
func sortErrors(errs ast.Errors) {
	slices.SortStableFunc(errs, func(a, b *ast.Error) int {
		la, lb := a.Location, b.Location
		if la == nil || lb == nil {
			return cmp.Compare(boolInt(la != nil), boolInt(lb != nil))
		}
		return cmp.Or(cmp.Compare(la.File, lb.File), cmp.Compare(la.Row, lb.Row), cmp.Compare(la.Col, lb.Col))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readRegoFiles reads every .rego file under paths, test files included,
// skipping hidden files and directories; a file named on its own must be a
// .rego file, and a directory must hold at least one.
func readRegoFiles(paths []string) ([]source, error) {
	var srcs []source
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, &LoadError{File: root, Err: unwrapPathError(err)}
		}
		if !info.IsDir() {
			if filepath.Ext(root) != ".rego" {
				return nil, &LoadError{File: root, Err: errors.New("not a .rego file")}
			}
			data, err := os.ReadFile(root)
			if err != nil {
				return nil, &LoadError{File: root, Err: unwrapPathError(err)}
			}
			srcs = append(srcs, source{path: root, data: data})
			continue
		}
		n := len(srcs)
		err = walkSources(root, func(path string) bool { return filepath.Ext(path) == ".rego" }, func(src source) {
			srcs = append(srcs, src)
		})
		if err != nil {
			return nil, err
		}
		if len(srcs) == n {
			return nil, &LoadError{File: root, Err: errors.New("no .rego files in this directory")}
		}
	}
	srcs = dedupe(srcs)
	return srcs, nil
}

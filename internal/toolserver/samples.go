package toolserver

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mewkit/fulfiller/agent"
)

var numberArgs = map[string]any{
	"type":       "object",
	"properties": map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number"}},
	"required":   []string{"a", "b"},
}

// Calculator returns the two tools of the recorded reference calculator:
// add and multiply, both read-only.
func Calculator() []Tool {
	arith := func(op func(a, b float64) float64) func(context.Context, json.RawMessage) (string, error) {
		return func(_ context.Context, raw json.RawMessage) (string, error) {
			var args struct {
				A *float64 `json:"a"`
				B *float64 `json:"b"`
			}
			if agent.Unmarshal(raw, &args) != nil || args.A == nil || args.B == nil {
				return "", badArgs("a and b must be numbers")
			}
			return strconv.FormatFloat(op(*args.A, *args.B), 'f', -1, 64), nil
		}
	}
	readOnly := map[string]any{"readOnlyHint": true}
	return []Tool{
		{Name: "add", Description: "Add two numbers", InputSchema: numberArgs, Annotations: readOnly, Call: arith(func(a, b float64) float64 { return a + b })},
		{Name: "multiply", Description: "Multiply two numbers", InputSchema: numberArgs, Annotations: readOnly, Call: arith(func(a, b float64) float64 { return a * b })},
	}
}

// Files is an in-memory file system behind four tools: read_file and
// list_dir (read-only), write_file (not destructive: it only adds or
// replaces one file), delete_path (destructive).
type Files struct {
	mu    sync.Mutex
	files map[string]string
}

// NewFiles makes a file system holding the given files.
func NewFiles(files map[string]string) *Files {
	f := &Files{files: map[string]string{}}
	for k, v := range files {
		f.files[k] = v
	}
	return f
}

// Read returns a file's content, for tests and the demo's narration.
func (f *Files) Read(path string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.files[path]
	return s, ok
}

func pathSchema(extra map[string]any) map[string]any {
	props := map[string]any{"path": map[string]any{"type": "string"}}
	for k, v := range extra {
		props[k] = v
	}
	return map[string]any{"type": "object", "properties": props, "required": []string{"path"}}
}

type pathArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func parsePath(raw json.RawMessage) (pathArgs, error) {
	var a pathArgs
	if agent.Unmarshal(raw, &a) != nil || a.Path == "" {
		return a, badArgs("path must be a non-empty string")
	}
	return a, nil
}

// Tools returns the file tools.
func (f *Files) Tools() []Tool {
	return []Tool{
		{
			Name: "read_file", Description: "Read a file", InputSchema: pathSchema(nil),
			Annotations: map[string]any{"readOnlyHint": true},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				a, err := parsePath(raw)
				if err != nil {
					return "", err
				}
				if s, ok := f.Read(a.Path); ok {
					return s, nil
				}
				return "", badArgs("no such file: %s", a.Path)
			},
		},
		{
			Name: "list_dir", Description: "List the files under a directory", InputSchema: pathSchema(nil),
			Annotations: map[string]any{"readOnlyHint": true},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				a, err := parsePath(raw)
				if err != nil {
					return "", err
				}
				prefix := strings.TrimSuffix(a.Path, "/") + "/"
				f.mu.Lock()
				var names []string
				for p := range f.files {
					if strings.HasPrefix(p, prefix) {
						names = append(names, p)
					}
				}
				f.mu.Unlock()
				sort.Strings(names)
				return strings.Join(names, "\n"), nil
			},
		},
		{
			Name: "write_file", Description: "Write a file, replacing it if it exists",
			InputSchema: pathSchema(map[string]any{"content": map[string]any{"type": "string"}}),
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				a, err := parsePath(raw)
				if err != nil {
					return "", err
				}
				f.mu.Lock()
				f.files[a.Path] = a.Content
				f.mu.Unlock()
				return "wrote " + strconv.Itoa(len(a.Content)) + " bytes to " + a.Path, nil
			},
		},
		{
			Name: "delete_path", Description: "Delete a file or a whole directory tree",
			InputSchema: pathSchema(nil),
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": true},
			Call: func(_ context.Context, raw json.RawMessage) (string, error) {
				a, err := parsePath(raw)
				if err != nil {
					return "", err
				}
				prefix := strings.TrimSuffix(a.Path, "/") + "/"
				f.mu.Lock()
				n := 0
				for p := range f.files {
					if p == a.Path || strings.HasPrefix(p, prefix) {
						delete(f.files, p)
						n++
					}
				}
				f.mu.Unlock()
				return "deleted " + strconv.Itoa(n) + " files under " + a.Path, nil
			},
		},
	}
}

// Jobs is a pair of long-running tools for the task demo: migrate must run
// as a task, build may. Each works in steps of Step (100ms when zero) and
// stops at the step where its context ends.
type Jobs struct {
	Step time.Duration
}

// Tools returns migrate (taskSupport required; arguments {"steps": n},
// 1 ≤ n ≤ 1000) and build (taskSupport optional; arguments
// {"target": name}, three steps).
func (j Jobs) Tools() []Tool {
	return []Tool{
		{
			Name: "migrate", Description: "Run a database migration of the given number of steps",
			InputSchema: map[string]any{
				"type":       "object",
				"properties": map[string]any{"steps": map[string]any{"type": "integer", "minimum": 1, "maximum": 1000}},
				"required":   []string{"steps"},
			},
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false},
			TaskSupport: TaskRequired,
			Call: func(ctx context.Context, raw json.RawMessage) (string, error) {
				var a struct {
					Steps *int `json:"steps"`
				}
				if agent.Unmarshal(raw, &a) != nil || a.Steps == nil || *a.Steps < 1 || *a.Steps > 1000 {
					return "", badArgs("steps must be an integer from 1 to 1000")
				}
				if err := j.work(ctx, *a.Steps); err != nil {
					return "", err
				}
				return "migrated " + strconv.Itoa(*a.Steps) + " steps", nil
			},
		},
		{
			Name: "build", Description: "Build a target",
			InputSchema: map[string]any{
				"type":       "object",
				"properties": map[string]any{"target": map[string]any{"type": "string"}},
				"required":   []string{"target"},
			},
			Annotations: map[string]any{"readOnlyHint": false, "destructiveHint": false},
			TaskSupport: TaskOptional,
			Call: func(ctx context.Context, raw json.RawMessage) (string, error) {
				var a struct {
					Target string `json:"target"`
				}
				if agent.Unmarshal(raw, &a) != nil || a.Target == "" {
					return "", badArgs("target must be a non-empty string")
				}
				if err := j.work(ctx, 3); err != nil {
					return "", err
				}
				return "built " + a.Target, nil
			},
		},
	}
}

// work takes n steps of j.Step, giving up when ctx ends.
func (j Jobs) work(ctx context.Context, n int) error {
	step := j.Step
	if step <= 0 {
		step = 100 * time.Millisecond
	}
	timer := time.NewTimer(step)
	defer timer.Stop()
	for i := 0; i < n; i++ {
		if i > 0 {
			timer.Reset(step)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped after %d of %d steps: %w", i, n, ctx.Err())
		case <-timer.C:
		}
	}
	return nil
}

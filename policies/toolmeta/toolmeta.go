// Package toolmeta provides the tool metadata an operator declares for the
// tools of a space (--tool-metadata FILE; DESIGN "Tool metadata the owner
// does not send"): annotations that stand in place of what each declared
// tool's owner says in tools/list.
//
// Two reasons to declare them. Tool servers behind the reference `mew
// bridge` list only name, description and inputSchema — the bridge drops
// the MCP server's annotations — so a policy deciding on readOnlyHint or
// destructiveHint sees nothing for them. And annotations are the owner's
// claims: any owner (or whoever answers tools/list in its name) may call a
// destructive tool read-only. For a declared tool the operator's word is
// the only one: the owner's annotations are not consulted.
//
// # The file
//
// YAML or JSON. Top-level keys are a tool owner's participant id, or "*"
// for any owner; under each, keys are tool names or glob patterns, and
// values hold the annotations:
//
//	fs:
//	  "read_*":   {annotations: {readOnlyHint: true}}
//	  write_file: {annotations: {readOnlyHint: false, destructiveHint: true}}
//	"*":
//	  "delete_*": {annotations: {destructiveHint: true}}
//
// Annotations are MCP's ToolAnnotations: title (a string) and the
// boolean hints readOnlyHint, destructiveHint, idempotentHint and
// openWorldHint. Anything else — an unknown key at any level, a hint that
// is not true or false, a glob that does not compile, a participant id
// with glob characters — is an error naming the file, the line and the
// key: a typo must never silently leave a tool undeclared.
//
// A tool key holding any of * ? [ ] { } \ is a glob pattern
// (github.com/gobwas/glob: * matches any run of characters, ? one, [a-z]
// a class, {a,b} either); any other key is an exact tool name.
//
// # Which entry applies
//
// For a tool, exactly one entry applies (or none); its annotations are the
// tool's, in place of the owner's. It is chosen by, in order:
//
//  1. the owner's own participant id over "*";
//  2. within that, an exact tool name over a pattern;
//  3. among matching patterns, the longest (in characters as written);
//  4. among patterns of equal length, the one written first in the file.
//
// So `fs: {"read_*": …}` beats `"*": {read_file: …}`: the entries for an
// owner are read as a whole before any "*" entry is considered. An entry
// with empty annotations ({annotations: {}}) still applies: the tool then
// has no annotations at all (MCP's defaults), whatever its owner says.
package toolmeta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gobwas/glob"
	"go.yaml.in/yaml/v3"
)

// AnyServer is the top-level key whose entries apply to every tool owner.
const AnyServer = "*"

// globChars are the characters that make a tool key a pattern.
const globChars = `*?[]{}\`

// booleanHints are MCP's boolean ToolAnnotations (MCP 2025-11-25).
var booleanHints = []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}

// Metadata is one loaded tool-metadata file. The zero value and nil declare
// nothing. It is immutable once loaded, so it may be shared freely.
type Metadata struct {
	file    string
	servers map[string]*toolSet
	entries int
}

// toolSet is the entries under one top-level key.
type toolSet struct {
	exact    map[string]*Entry
	patterns []*Entry // in precedence order: longest first, then file order
}

// Entry is one declaration: a tool name or pattern under an owner (or
// "*"), and the annotations the operator gives it.
type Entry struct {
	// Ref says where the entry is written.
	Ref
	// Annotations is the declared annotations object, as JSON.
	Annotations json.RawMessage

	keys    map[string]json.RawMessage
	pattern *glob.Pattern // nil for an exact name
}

// Ref names an entry: the file and line it is written on, the owner key
// and the tool key as written. It is what GET /v1/tools shows as the
// entry that applied.
type Ref struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
}

// String is the entry as an operator finds it: FILE:LINE (SERVER: TOOL).
func (r Ref) String() string {
	return fmt.Sprintf("%s:%d (%s: %s)", r.File, r.Line, r.Server, r.Tool)
}

// Error is a problem in a tool-metadata file: the file, the line (0 when
// unknown), the key path and what is wrong, on one line.
type Error struct {
	File string
	Line int
	Key  string // e.g. `fs: "read_*": annotations: readOnlyHint`; empty for the whole file
	Msg  string
	Err  error // the cause, when one library reported it
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads and validates the file at path.
func Load(path string) (*Metadata, error) {
	_, m, err := read(path)
	return m, err
}

// Parse validates raw, the text of the file named file (used in errors and
// in each entry's Ref).
func Parse(file string, raw []byte) (*Metadata, error) {
	m := &Metadata{file: file, servers: map[string]*toolSet{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return m, nil // an empty file declares nothing
		}
		line, msg := yamlLine(err)
		return nil, &Error{File: file, Line: line, Msg: msg, Err: err}
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, &Error{File: file, Line: more.Line, Msg: "more than one YAML document; put every owner in one mapping"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Tag == "!!null" {
		return m, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Msg: "want a mapping of tool owners (participant ids, or \"*\") to their tools, got " + kindName(root)}
	}
	err := eachPair(file, root, "", func(kn, vn *yaml.Node) error {
		server := kn.Value
		if server != AnyServer && strings.ContainsAny(server, globChars) {
			return &Error{File: file, Line: kn.Line, Key: quoteKey(server),
				Msg: `a tool owner is a participant id, or "*" alone for every owner; glob patterns are for tool names`}
		}
		if vn.Tag == "!!null" {
			return &Error{File: file, Line: kn.Line, Key: quoteKey(server), Msg: "no tools declared; remove the owner or list its tools"}
		}
		if vn.Kind != yaml.MappingNode {
			return &Error{File: file, Line: vn.Line, Key: quoteKey(server), Msg: "want a mapping of tool names or patterns to {annotations: {...}}, got " + kindName(vn)}
		}
		set := &toolSet{exact: map[string]*Entry{}}
		m.servers[server] = set
		return eachPair(file, vn, quoteKey(server), func(tk, tv *yaml.Node) error {
			e, err := parseEntry(file, server, tk, tv)
			if err != nil {
				return err
			}
			m.entries++
			if e.pattern == nil {
				set.exact[e.Tool] = e
			} else {
				set.patterns = append(set.patterns, e)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	for _, set := range m.servers {
		// Stable: equal lengths keep the file's order.
		sort.SliceStable(set.patterns, func(i, j int) bool { return len(set.patterns[i].Tool) > len(set.patterns[j].Tool) })
	}
	return m, nil
}

// parseEntry reads one `tool: {annotations: {...}}` pair.
func parseEntry(file, server string, kn, vn *yaml.Node) (*Entry, error) {
	tool := kn.Value
	key := quoteKey(server) + ": " + quoteKey(tool)
	e := &Entry{Ref: Ref{File: file, Line: kn.Line, Server: server, Tool: tool}}
	if strings.ContainsAny(tool, globChars) {
		p, err := glob.Compile(tool)
		if err != nil {
			return nil, &Error{File: file, Line: kn.Line, Key: key, Msg: "bad glob pattern: " + strings.TrimPrefix(err.Error(), "glob: "), Err: err}
		}
		e.pattern = p
	}
	if vn.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: vn.Line, Key: key, Msg: "want {annotations: {...}}, got " + kindName(vn)}
	}
	var annotations *yaml.Node
	err := eachPair(file, vn, key, func(fk, fv *yaml.Node) error {
		switch fk.Value {
		case "annotations":
			annotations = fv
			return nil
		case "execution":
			return &Error{File: file, Line: fk.Line, Key: key + ": execution",
				Msg: "declaring execution is not supported: fulfiller would call as a task a tool whose owner never said it can run one"}
		}
		return &Error{File: file, Line: fk.Line, Key: key + ": " + quoteKey(fk.Value), Msg: "unknown key (an entry holds annotations)"}
	})
	if err != nil {
		return nil, err
	}
	if annotations == nil {
		return nil, &Error{File: file, Line: kn.Line, Key: key, Msg: "no annotations: want {annotations: {...}}"}
	}
	key += ": annotations"
	if annotations.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: annotations.Line, Key: key, Msg: "want a mapping of MCP tool annotations, got " + kindName(annotations)}
	}
	e.keys = map[string]json.RawMessage{}
	err = eachPair(file, annotations, key, func(ak, av *yaml.Node) error {
		name := ak.Value
		var v any
		switch {
		case name == "title":
			if av.Kind != yaml.ScalarNode || av.Tag != "!!str" {
				return &Error{File: file, Line: av.Line, Key: key + ": title", Msg: "want a string, got " + kindName(av)}
			}
			v = av.Value
		case isBooleanHint(name):
			if av.Kind != yaml.ScalarNode || av.Tag != "!!bool" {
				return &Error{File: file, Line: av.Line, Key: key + ": " + name, Msg: "want true or false, got " + kindName(av)}
			}
			var b bool
			if err := av.Decode(&b); err != nil {
				return &Error{File: file, Line: av.Line, Key: key + ": " + name, Msg: err.Error(), Err: err}
			}
			v = b
		default:
			return &Error{File: file, Line: ak.Line, Key: key + ": " + quoteKey(name),
				Msg: "unknown annotation (MCP's are title, " + strings.Join(booleanHints, ", ") + ")"}
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", key, name, err)
		}
		e.keys[name] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(e.keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	e.Annotations = b
	return e, nil
}

// eachPair walks a mapping's pairs, refusing keys that are not plain
// strings, duplicates and YAML merge keys (<<), whose entries would come
// from elsewhere in the file than the key a reader looks at.
func eachPair(file string, n *yaml.Node, at string, fn func(k, v *yaml.Node) error) error {
	seen := map[string]int{}
	prefix := ""
	if at != "" {
		prefix = at + ": "
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			return &Error{File: file, Line: k.Line, Key: at, Msg: "keys must be plain names (no YAML merge keys or complex keys)"}
		}
		if k.Tag != "!!str" {
			// 1, true, null as a key: almost always a mistake, and a
			// participant or tool id is a string.
			return &Error{File: file, Line: k.Line, Key: prefix + quoteKey(k.Value), Msg: "a key must be a string; quote it"}
		}
		if k.Value == "" {
			return &Error{File: file, Line: k.Line, Key: at, Msg: "empty key"}
		}
		if line, dup := seen[k.Value]; dup {
			return &Error{File: file, Line: k.Line, Key: prefix + quoteKey(k.Value), Msg: fmt.Sprintf("duplicate key (first on line %d)", line)}
		}
		seen[k.Value] = k.Line
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

func isBooleanHint(name string) bool {
	for _, h := range booleanHints {
		if h == name {
			return true
		}
	}
	return false
}

// quoteKey writes a key as YAML would need it: quoted when it holds
// characters YAML reads specially, so that the error shows what to type.
func quoteKey(k string) string {
	if k == "" || strings.ContainsAny(k, globChars+`:#"' ,&!|>%@`+"`") {
		return fmt.Sprintf("%q", k)
	}
	return k
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing (null)"
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		}
		return n.Value
	}
	return "something else"
}

// yamlLine splits a yaml.v3 syntax error ("yaml: line 3: …") into the
// line (0 when it names none) and the message.
func yamlLine(err error) (int, string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr != nil {
		return 0, msg
	}
	_, rest, _ := strings.Cut(msg, ": ")
	return line, rest
}

// File is the path the metadata was loaded from.
func (m *Metadata) File() string {
	if m == nil {
		return ""
	}
	return m.file
}

// Len is the number of entries declared.
func (m *Metadata) Len() int {
	if m == nil {
		return 0
	}
	return m.entries
}

// Lookup returns the entry that applies to tool as served by server (see
// the package doc for the order), or nil when none does or server is
// unknown (""): an owner-specific entry might have applied, so no "*"
// entry is guessed in its place.
func (m *Metadata) Lookup(server, tool string) *Entry {
	if m == nil || server == "" || tool == "" {
		return nil
	}
	if e := m.servers[server].lookup(tool); e != nil {
		return e
	}
	if server == AnyServer {
		return nil
	}
	return m.servers[AnyServer].lookup(tool)
}

func (s *toolSet) lookup(tool string) *Entry {
	if s == nil {
		return nil
	}
	if e, ok := s.exact[tool]; ok {
		return e
	}
	for _, e := range s.patterns {
		if e.pattern.Match(tool) {
			return e
		}
	}
	return nil
}

// Annotate returns the annotations a policy sees for tool as served by
// server, whose owner sent owner in tools/list (nil when it sent none),
// and the entry that applies (nil when none does). For a declared tool
// they are the operator's annotations alone: hints the operator leaves
// out are absent (a policy reads them as MCP's defaults), never the
// owner's, because an owner's readOnlyHint: true beside the operator's
// destructiveHint: true would make a destructive tool look read-only
// (docs/design.md, "Tool metadata the owner does not send"). For a tool
// nobody declares they are owner, unchanged; nil when the owner sent
// none: absent, never invented.
func (m *Metadata) Annotate(server, tool string, owner json.RawMessage) (json.RawMessage, *Entry) {
	e := m.Lookup(server, tool)
	if e == nil {
		return owner, nil
	}
	return e.Annotations, e
}

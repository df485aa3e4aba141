package policies

import (
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// dataCache is the topdown.BaseCache of one policy set, shared by all its
// evaluations. OPA's default is a fresh cache per evaluation, so every
// decision read each data document it touched (data.settings.…) out of the
// store again and built the cache's trie again: about a tenth of what a
// decision allocated. A policy set's data never changes once built (a
// reload makes a new set, with a new store and a new cache), and the cache
// only holds what the store returned for a ground path, never anything
// derived from the input, so sharing it cannot change a decision.
//
// Reads take no lock (sync.Map's loads); writes, which happen only the
// first time each path is read, are serialised.
type dataCache struct {
	root  dataNode
	mu    sync.Mutex // serialises writers
	nodes int        // guarded by mu
}

// maxDataCacheNodes bounds the trie. A policy that reads data at paths
// made from its input (data.users[input.proposer.id]) adds one path per
// distinct value found; past the bound such reads go to the store each
// time, as they do without the cache.
const maxDataCacheNodes = 1 << 14

// dataNode is one step of a data path. A node with a value holds the
// whole document at its path, and Get looks no further down: what was
// cached below it before is shadowed, as OPA's own base cache drops it.
type dataNode struct {
	value    atomic.Pointer[ast.Value]
	children sync.Map // ast.Value (the next step of the path) → *dataNode
}

func newDataCache() *dataCache { return &dataCache{} }

// Get returns the document at ref, or nil when it is not cached.
func (c *dataCache) Get(ref ast.Ref) ast.Value {
	node := &c.root
	for i := range ref {
		next, ok := node.children.Load(ref[i].Value)
		if !ok {
			return nil
		}
		node = next.(*dataNode)
		if v := node.value.Load(); v != nil {
			found, err := (*v).Find(ref[i+1:])
			if err != nil {
				return nil
			}
			return found
		}
	}
	return nil
}

// Put caches value, what the store holds at ref.
func (c *dataCache) Put(ref ast.Ref, value ast.Value) {
	if value == nil {
		return // nothing to cache (topdown never puts one)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	node := &c.root
	for i := range ref {
		next, ok := node.children.Load(ref[i].Value)
		if !ok {
			if c.nodes >= maxDataCacheNodes {
				return
			}
			next = &dataNode{}
			node.children.Store(ref[i].Value, next)
			c.nodes++
		}
		node = next.(*dataNode)
	}
	node.value.Store(&value)
}

// ruleCache is a topdown.VirtualCache (the values of rules and function
// calls within one evaluation) that is reused from one evaluation to the
// next. OPA's default builds a trie of hash maps per evaluation, about a
// tenth of what a decision allocated; this one keeps its maps and entries
// and clears them between evaluations (see getRuleCache and release).
//
// It behaves as OPA's: a stack of frames (Push for a `with`, Pop after),
// Get and Put on the top frame only, a nil value marks the ref undefined,
// and once undefined a ref stays so in its frame.
type ruleCache struct {
	frames  []ruleFrame
	entries []ruleEntry
	terms   []*ast.Term // copies of the refs of entries (see copyRef)
}

// ruleFrame maps a ref's hash to the last entry with that hash; entries
// with the same hash are chained through next.
type ruleFrame struct {
	index map[int]int32
	first int // entries[first:] belong to this frame
}

type ruleEntry struct {
	ref       ast.Ref
	value     *ast.Term
	undefined bool
	next      int32 // previous entry with the same hash, or -1
}

var ruleCaches = sync.Pool{New: func() any { return new(ruleCache) }}

// getRuleCache returns an empty cache with one frame.
func getRuleCache() *ruleCache {
	c := ruleCaches.Get().(*ruleCache)
	c.Push()
	return c
}

// maxPooledRuleEntries keeps an evaluation that cached unusually much
// from pinning that memory in the pool.
const maxPooledRuleEntries = 4096

// release empties c and returns it to the pool. Nothing may use c after.
func (c *ruleCache) release() {
	for len(c.frames) > 0 {
		c.Pop()
	}
	clear(c.terms)
	c.terms = c.terms[:0]
	if cap(c.entries) > maxPooledRuleEntries || cap(c.terms) > 8*maxPooledRuleEntries {
		return
	}
	ruleCaches.Put(c)
}

// Push starts a new, empty frame.
func (c *ruleCache) Push() {
	n := len(c.frames)
	if n < cap(c.frames) {
		c.frames = c.frames[:n+1]
	} else {
		c.frames = append(c.frames, ruleFrame{})
	}
	f := &c.frames[n]
	if f.index == nil {
		f.index = make(map[int]int32)
	}
	f.first = len(c.entries)
}

// Pop drops the top frame and its entries. The copies of their refs stay
// in terms until release: frames above the first (one per `with`) are
// few and small.
func (c *ruleCache) Pop() {
	n := len(c.frames)
	if n == 0 {
		return
	}
	f := &c.frames[n-1]
	clear(f.index)
	clear(c.entries[f.first:])
	c.entries = c.entries[:f.first]
	c.frames = c.frames[:n-1]
}

func (c *ruleCache) find(f *ruleFrame, ref ast.Ref, h int) int32 {
	i, ok := f.index[h]
	if !ok {
		return -1
	}
	for ; i >= 0; i = c.entries[i].next {
		if c.entries[i].ref.Equal(ref) {
			return i
		}
	}
	return -1
}

// Get returns the cached value of ref: (nil, true) when it is cached as
// undefined, (nil, false) when it is not cached.
func (c *ruleCache) Get(ref ast.Ref) (*ast.Term, bool) {
	f := &c.frames[len(c.frames)-1]
	i := c.find(f, ref, ref.Hash())
	if i < 0 {
		return nil, false
	}
	e := &c.entries[i]
	if e.undefined {
		return nil, true
	}
	return e.value, false
}

// Put caches value for ref, or marks ref undefined when value is nil.
// The caller may reuse ref's backing array: it is copied.
func (c *ruleCache) Put(ref ast.Ref, value *ast.Term) {
	f := &c.frames[len(c.frames)-1]
	h := ref.Hash()
	i := c.find(f, ref, h)
	if i < 0 {
		head, ok := f.index[h]
		if !ok {
			head = -1
		}
		i = int32(len(c.entries))
		c.entries = append(c.entries, ruleEntry{ref: c.copyRef(ref), next: head})
		f.index[h] = i
	}
	e := &c.entries[i]
	if value != nil {
		e.value = value
	} else {
		e.undefined = true
	}
}

// copyRef copies ref into c.terms, growing it (and leaving the refs
// copied so far where they are) when full.
func (c *ruleCache) copyRef(ref ast.Ref) ast.Ref {
	if len(c.terms)+len(ref) > cap(c.terms) {
		c.terms = make([]*ast.Term, 0, max(256, 2*cap(c.terms), len(ref)))
	}
	start := len(c.terms)
	c.terms = append(c.terms, ref...)
	return ast.Ref(c.terms[start:len(c.terms):len(c.terms)])
}

// Keys returns the refs with a cached value in the top frame.
func (c *ruleCache) Keys() []ast.Ref {
	f := &c.frames[len(c.frames)-1]
	var keys []ast.Ref
	for _, e := range c.entries[f.first:] {
		// OPA's cache never reports the empty ref, its trie's root.
		if e.value != nil && len(e.ref) > 0 {
			keys = append(keys, e.ref)
		}
	}
	return keys
}

package refgraph

import (
	"maps"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/adstap/adstap/internal/weakintern"
)

// The graphs of streams sent the same configuration hold the same nodes:
// the sidecars of a namespace, a tap in front of istiod for thousands of
// them. So at a tick a graph's nodes that changed since the last are looked
// up by content tap-wide, and a graph whose nodes another holds already
// shares that map, read-only. The next change copies it first, and the
// copy is the graph's own until a tick shares it again: a graph pays at
// most one copy and one lookup a tick, however many pushes change it in
// between, and an endpoint change costs what it touches. The store holds
// the maps weakly: one no graph holds any more is collected.

// sharedFrom is the fewest nodes that are shared: a smaller map costs less
// than its lookup and its entry.
var sharedFrom = 8

// sharedNodes is a map of nodes that every graph holding it reads, and
// none writes.
type sharedNodes struct {
	m map[name]node
	// found: a graph other than the one that stored it found it.
	found atomic.Bool
}

var nodeMaps weakintern.Store[sharedNodes]

// nodeMapPool holds node maps a graph let go of for a shared equal one,
// emptied, for the next graph's first push to fill. As a fleet of proxies
// syncs, every graph but the first builds the same nodes it then finds
// shared already: without the pool each would be garbage the moment it is
// built, a map of the whole mesh's clusters for every proxy.
var nodeMapPool sync.Pool // of *pooledNodes

// pooledNodes is an emptied map of nodes and how many it held: a first
// push much larger than that would grow it step by step, and is better
// served by a map made to its size.
type pooledNodes struct {
	m    map[name]node
	held int
}

// borrowNodeMap returns an empty map for about size nodes.
func borrowNodeMap(size int) map[name]node {
	if m := pooledNodeMap(size); m != nil {
		return m
	}
	return make(map[name]node, size)
}

// pooledNodeMap returns an empty map from nodeMapPool for about size nodes,
// or nil.
func pooledNodeMap(size int) map[name]node {
	if p, ok := nodeMapPool.Get().(*pooledNodes); ok && p.held >= size/2 {
		return p.m
	}
	return nil
}

// ownNodes makes the graph's nodes its own to write, copying them if they
// are shared: into a pooled map, which a push to many graphs at once
// (shareNodes) gives back, or else a clone, which copies the table as it is
// rather than hashing every name again, but into fresh memory.
func (g *Graph) ownNodes() {
	if g.nodesShared == nil {
		return
	}
	if m := pooledNodeMap(len(g.nodes)); m != nil {
		maps.Copy(m, g.nodes)
		g.nodes, g.nodesShared = m, nil
		return
	}
	g.nodes, g.nodesShared = maps.Clone(g.nodes), nil
}

// shareNodes looks the graph's own nodes up by content, at a tick and
// after a type's first push of more than smallPush resources, and after a
// push that changed nodes other graphs shared: it shares the map
// another graph holds (and gives its own to nodeMapPool), or stores its own
// for the graphs to come.
func (g *Graph) shareNodes() {
	if g.nodesShared != nil || len(g.nodes) < sharedFrom {
		return
	}
	var sum uint64
	for n, x := range g.nodes {
		sum += nodeSum(n, x) // in any order
	}
	mine := g.nodes
	stored := false
	s := nodeMaps.Get(sum, func(s *sharedNodes) bool { return maps.Equal(s.m, mine) },
		func() *sharedNodes { stored = true; return &sharedNodes{m: mine} })
	if !stored {
		s.found.Store(true)
		held := len(mine)
		clear(mine)
		nodeMapPool.Put(&pooledNodes{m: mine, held: held})
	}
	g.nodes, g.nodesShared = s.m, s
}

func nodeSum(n name, x node) uint64 {
	var h uint64
	if n != noName {
		h = uint64(uintptr(unsafe.Pointer(unsafe.StringData(n.Value()))))
	}
	if x.config != noName {
		h ^= bits.RotateLeft64(uint64(uintptr(unsafe.Pointer(unsafe.StringData(x.config.Value())))), 17)
	}
	h ^= uint64(uintptr(unsafe.Pointer(x.extra))) ^ uint64(uint32(x.endpoints))<<32 ^ uint64(uint32(x.healthy)) ^
		uint64(x.flags)<<56 ^ uint64(x.wait)<<40
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

package refgraph

import "slices"

// What the external tests check of a finding and a graph.

func (f Finding) ShareText() string { return f.shareText() }

func (g *Graph) Reported() int { return g.reportedCount() }

// ShareNodesFrom sets the fewest nodes that graphs share, and returns what
// puts it back.
func ShareNodesFrom(n int) (restore func()) {
	old := sharedFrom
	sharedFrom = n
	return func() { sharedFrom = old }
}

// ShareNodes shares the graph's nodes, as a tick does.
func (g *Graph) ShareNodes() { g.shareNodes() }

// SharesNodesWith reports whether the graph reads the same shared nodes as o.
func (g *Graph) SharesNodesWith(o *Graph) bool {
	return g.nodesShared != nil && g.nodesShared == o.nodesShared
}

// SmallPush is the most resources of a type's first push after which a
// graph does not look its nodes up at once, but at the next tick.
const SmallPush = smallPush

// Maps names the maps of kinds the graph holds, which it makes on first
// use (nodes aside).
func (g *Graph) Maps() []string {
	var out []string
	for name, held := range map[string]bool{"byService": g.byService != nil, "routes": g.routes != nil,
		"listeners": g.listeners != nil, "secrets": g.secrets != nil, "open": g.open != nil} {
		if held {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

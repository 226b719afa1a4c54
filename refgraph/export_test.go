package refgraph

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

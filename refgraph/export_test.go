package refgraph

// What the external tests check of a finding and a graph.

func (f Finding) ShareText() string { return f.shareText() }

func (g *Graph) Reported() int { return g.reportedCount() }

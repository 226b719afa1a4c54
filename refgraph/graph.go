package refgraph

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/canon"
)

// Graph is the reference graph of one stream: what the client has accepted
// of each type, as the names each resource refers to, and the references
// that dangle. It is told the client's requests (Requested) and each push
// the client accepted (Accepted), as the tracker, the one judge of which
// push awaits its answer, hands it over; it applies it and checks the
// references the change touched. Not safe for concurrent use.
type Graph struct {
	delta bool
	grace time.Duration

	// nodes holds the clusters and the EDS assignments, by name: in a mesh
	// each cluster's assignment bears its name, and one map entry for both
	// is most of what a stream's graph holds.
	nodes map[name]node
	// nodesShared, when set, is the map nodes is, shared with other
	// graphs: read-only (shared.go).
	nodesShared *sharedNodes
	// byService lists the clusters whose assignment bears another name
	// (eds_cluster_config.service_name), by that name; rare.
	byService map[name][]name
	routes    map[name][]routeRef // RDS route configurations
	listeners map[name]listenerRefs
	secrets   map[name]struct{}
	// accepted marks the types the client has accepted a push of: a
	// reference to a type it never received (it may take it from another
	// stream) is not checked, but for those it waits for on this one.
	accepted typeSet
	// explicitClusters: the client asks for clusters by name (grpc-go does,
	// from its routes), so a route's new cluster comes after the route.
	explicitClusters bool
	requested        typeSet

	open map[owner][]*openFinding
	// waits are the starts of the EDS clusters' waits for their
	// assignments, one for every check that started some, which the
	// waiting clusters' nodes index (node.wait). A wait lasts until it has
	// lasted the grace (Tick) or the assignment comes empty (settle): then
	// it becomes an open finding, keeping its start. A stream's initial
	// sync starts a wait for every cluster, and most end within moments,
	// when the assignments come; as open findings they were 240 bytes and a
	// map entry each, and as a map of their own 1.5 MB at the peak of a
	// sidecar's first push of 40,000 clusters, where in the node they take
	// bytes its alignment left unused. waiting counts the nodes waiting;
	// waits is let go of when none does.
	waits   []clusterWait
	waiting int
	// openPeak is the most owners open has held since it was made: a Go
	// map never shrinks, and a stream whose assignments never came holds a
	// finding for every cluster once the waits have lasted the grace.
	openPeak int
	// reported counts the findings reported now.
	reported int
	// due is when the earliest finding not yet reported has waited the
	// grace (zero: none waits, or not known): Tick before it has nothing to
	// do, and the tap ticks every stream's graph every second.
	due time.Time
	// scans, when set, are the scans shared with other streams' graphs.
	scans *Scans
	// sharedSinceTick: a later push looked the nodes up since the last
	// tick (Accepted).
	sharedSinceTick bool
}

// node is a cluster, an EDS assignment, or both, under one name.
type node struct {
	config             name          // the cluster's Istio object
	extra              *clusterExtra // nil for most clusters
	endpoints, healthy int32         // the assignment's
	flags              uint8
	// wait is, for an EDS cluster waiting for its assignment, its wait's
	// position in Graph.waits, plus one; 0 for none.
	wait uint16
}

// clusterWait is when EDS clusters' waits for assignments not sent yet
// started, and the round of the push that started them; n counts the
// clusters still waiting since then.
type clusterWait struct {
	since int64 // Unix nanoseconds
	round uint64
	n     int
}

// maxWaits is the most starts Graph.waits holds, as many as node.wait
// tells apart.
const maxWaits = 1<<16 - 1

const (
	isCluster uint8 = 1 << iota
	// needsEndpoints: an EDS cluster whose assignment comes over this stream.
	needsEndpoints
	hasAssignment
	// endpointsElsewhere: the assignment's endpoints come by another
	// discovery (LEDS), uncounted.
	endpointsElsewhere
)

// clusterExtra is what few clusters have: an assignment under another name,
// secrets to come over the stream.
type clusterExtra struct {
	service name
	secrets []name
}

// service is the name a cluster's assignment comes under.
func (n *node) service(own name) name {
	if n.extra != nil && n.extra.service != noName {
		return n.extra.service
	}
	return own
}

func (n *node) secrets() []name {
	if n.extra == nil {
		return nil
	}
	return n.extra.secrets
}

// ShareScans makes the graph read what a resource refers to from scans,
// which the graphs of other streams share, when the same bytes were
// scanned for one of them; nil scans every resource anew.
func (g *Graph) ShareScans(scans *Scans) { g.scans = scans }

// Delta reports whether the graph is a Delta stream's.
func (g *Graph) Delta() bool { return g.delta }

// owner is a resource that holds references.
type owner struct {
	typ byte // 'c' cluster, 'l' listener, 'r' route configuration
	n   name
}

// openFinding is a finding while it lasts.
type openFinding struct {
	Finding
	key      findingKey
	reported bool
	// immediate: the proxy uses the reference at once; else it waits for
	// its target (a warming listener or cluster), which is only a problem
	// once it has waited grace.
	immediate bool
	// target, ownerName: what present() looks up.
	target name
}

type findingKey struct {
	kind                         Kind
	routeConfig, vhost, route, t name
}

// New returns the graph of a stream (delta: a Delta xDS stream). A
// reference the client waits for (a listener's route configuration, a
// cluster's endpoints, a secret) is reported once it has waited grace.
func New(delta bool, grace time.Duration) *Graph {
	return &Graph{delta: delta, grace: grace, nodes: map[name]node{}}
}

// set puts k in *m, making the map on first use: a graph holds maps of
// kinds most streams never fill (a sidecar's assignments under other
// names, a proxyless client's listeners, findings), and every idle stream
// held an empty one of each.
func set[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

// typeSet is a set of the types a graph reads (Reads), a bit each.
type typeSet uint8

func typeBit(typeURL string) typeSet {
	switch typeURL {
	case codec.TypeCluster:
		return 1
	case codec.TypeEndpoint:
		return 2
	case codec.TypeListener:
		return 4
	case codec.TypeRoute:
		return 8
	case codec.TypeSecret:
		return 16
	}
	return 0
}

func (s typeSet) has(typeURL string) bool { return s&typeBit(typeURL) != 0 }

func (s *typeSet) add(typeURL string) { *s |= typeBit(typeURL) }

type scanned struct {
	name name
	// kept: the client keeps what it had under the name (the push carried
	// it unchanged, its body not at hand, or as a heartbeat).
	kept    bool
	cluster clusterRefs
	// listener is a pointer: listeners are few, and inline their refs
	// would double the size of every cluster's scan in a push's scratch
	// and in the scans the streams share.
	listener   *listenerRefs
	routes     []routeRef
	assignment assignment
}

// Reads reports whether the graph reads the resources of a type: what an
// output need hand it of what a client accepted.
func Reads(typeURL string) bool {
	switch typeURL {
	case codec.TypeCluster, codec.TypeEndpoint, codec.TypeListener, codec.TypeRoute, codec.TypeSecret:
		return true
	}
	return false
}

func unique1(s string) name { return canon.Make(s) }

// Resource is one resource of a push the client accepted.
type Resource struct {
	Name string
	// Body is the serialized resource; it must stay valid only during
	// Accepted. Without one, a resource Unchanged is what the graph has
	// under its name.
	Body []byte
	// Unchanged: the push carried the resource as the client had accepted
	// it before, or as a heartbeat.
	Unchanged bool
	// Hash is the body's content hash (codec.Resource.Hash), by which a
	// scan is shared (Scans); 0 when unknown.
	Hash uint64
}

// Push is a push the client accepted (an ACK, or a newer push superseding
// it, which the tracker assumes applied), as the graph reads it.
type Push struct {
	TypeURL string
	// Resources are the push's resources, read in place one at a time,
	// never gathered: a sidecar's first push of 40,000 clusters gathered in
	// a list of the graph's own, and again scanned, was 6 MB more at the
	// peak of the push, besides the list the tracker hands over.
	Resources Resources
	// Removed are the names the push dropped: a Delta push's removals, or
	// what a SotW push that replaces its type no longer carried when only
	// what it changed is given.
	Removed []string
	// Replace is set when the push is the whole of its type
	// (codec.Replaces), so that what it lacks is gone; otherwise everything
	// else the graph holds of the type stays as it is, unchecked again, and
	// the call costs what the push changed.
	Replace bool
}

// Resources are a push's resources, as the graph reads them during
// Accepted.
type Resources interface {
	Len() int
	Resource(i int) Resource
}

// List is Resources in a list.
type List []Resource

func (l List) Len() int                { return len(l) }
func (l List) Resource(i int) Resource { return l[i] }

// Accepted applies a push of a type that the client accepted, and returns
// what the change started and resolved.
func (g *Graph) Accepted(p Push, at time.Time, round uint64) []Change {
	if !Reads(p.TypeURL) {
		return nil
	}
	typeURL, count := p.TypeURL, 0
	if p.Resources != nil {
		count = p.Resources.Len()
	}
	first := !g.accepted.has(typeURL)
	// Nodes that other graphs share are likely to change as theirs do, by
	// the same push to each.
	wasShared := g.nodesShared != nil && g.nodesShared.found.Load()
	var ch changeSet
	if first {
		g.accepted.add(typeURL)
		// A type now checked for the first time: every reference to it.
		ch.allListeners, ch.allRoutes, ch.allClusters = true, true, true
	}
	if count > smallPush {
		// Grown once rather than by doubling at the push's peak. A first
		// push checks every cluster anyway (allClusters), without a mark
		// for each.
		if !first {
			ch.owners = borrowOwners(count)
		}
		if len(g.nodes) == 0 && (typeURL == codec.TypeCluster || typeURL == codec.TypeEndpoint) {
			g.nodes, g.nodesShared = borrowNodeMap(count), nil
		}
	}
	if len(p.Removed) > 0 {
		gone := borrowNames(len(p.Removed))
		defer giveNames(gone)
		for _, n := range p.Removed {
			gone[unique1(n)] = true
		}
		g.remove(typeURL, func(n name) bool { return gone[n] }, &ch)
	}
	// What a push that replaces its type carries, to remove the rest once
	// it is applied; the graph holds none of a type it is handed for the
	// first time.
	var keep map[name]bool
	if p.Replace && !first {
		keep = borrowNames(count)
		defer giveNames(keep)
	}
	for i := range count {
		r := p.Resources.Resource(i)
		if r.Name == "" {
			continue
		}
		var s scanned
		switch {
		case r.Unchanged && len(r.Body) == 0:
			s.name, s.kept = unique1(r.Name), true
		case g.scans != nil && r.Hash != 0:
			g.scans.scan(&s, typeURL, r.Name, r.Body, r.Hash)
		default:
			s.name = unique1(r.Name)
			s.scan(typeURL, r.Body)
		}
		if keep != nil {
			keep[s.name] = true
		}
		g.apply(typeURL, &s, &ch)
	}
	if keep != nil {
		g.remove(typeURL, func(n name) bool { return !keep[n] }, &ch)
	}
	g.recheck(&ch, at, round)
	switch {
	case first && count > smallPush:
		// A fleet of proxies syncing is sent the same first push: looked
		// up now, the nodes this graph built go back to the pool for the
		// next graph's, rather than to the collector at the tick.
		g.shareNodes()
	case wasShared && g.nodesShared == nil && !g.sharedSinceTick:
		// Then each change to all of them at once: the copy goes back to
		// the pool for the next graph's. Once a tick: a stream sent many
		// pays at most two copies and lookups a tick, not one a push; and
		// a stream whose nodes no other graph shared (a lone sidecar)
		// pays one, at the tick.
		g.sharedSinceTick = true
		g.shareNodes()
	}
	return ch.out
}

// scan reads what the body of a resource of typeURL refers to. What cannot
// be read is kept by name, with the references read before the fault: the
// name alone keeps what refers to it from dangling.
func (s *scanned) scan(typeURL string, body []byte) {
	switch typeURL {
	case codec.TypeCluster:
		s.cluster, _ = scanCluster(body, s.name)
	case codec.TypeListener:
		l, _ := scanListener(body)
		l.clip()
		s.listener = &l
	case codec.TypeRoute:
		s.routes, _ = scanRouteConfig(body, s.name, nil)
		s.routes = slices.Clip(s.routes)
	case codec.TypeEndpoint:
		s.assignment, _ = scanAssignment(body)
	}
}

// Holds reports whether the graph holds a resource of typeURL named name:
// one the client accepted and has not dropped since, as the graph applied
// what it was handed.
func (g *Graph) Holds(typeURL, name string) bool {
	return Reads(typeURL) && g.has(typeURL, unique1(name))
}

// has reports whether the graph holds a resource of typeURL named n.
func (g *Graph) has(typeURL string, n name) bool {
	switch typeURL {
	case codec.TypeCluster:
		return g.nodes[n].flags&isCluster != 0
	case codec.TypeEndpoint:
		return g.nodes[n].flags&hasAssignment != 0
	case codec.TypeListener:
		_, ok := g.listeners[n]
		return ok
	case codec.TypeRoute:
		_, ok := g.routes[n]
		return ok
	}
	_, ok := g.secrets[n]
	return ok
}

// Requested applies what a request says of the client's subscription: in
// SotW its names are what it wants (others of the type are dropped, but for
// a wildcard); in Delta it drops what it unsubscribes from.
func (g *Graph) Requested(req *codec.Request, at time.Time, round uint64) []Change {
	if !Reads(req.TypeURL) {
		return nil
	}
	first := !g.requested.has(req.TypeURL)
	g.requested.add(req.TypeURL)
	var drop func(name) bool
	if req.Delta {
		if first && req.TypeURL == codec.TypeCluster {
			g.explicitClusters = len(req.Subscribe) > 0 && !slices.Contains(req.Subscribe, "*")
		}
		if len(req.Unsubscribe) == 0 {
			return nil
		}
		gone := borrowNames(len(req.Unsubscribe))
		defer giveNames(gone)
		for _, n := range req.Unsubscribe {
			gone[unique1(n)] = true
		}
		drop = func(n name) bool { return gone[n] }
	} else {
		wildcard := len(req.ResourceNames) == 0 || slices.Contains(req.ResourceNames, "*")
		if req.TypeURL == codec.TypeCluster {
			g.explicitClusters = !wildcard
		}
		if wildcard {
			return nil
		}
		want := borrowNames(len(req.ResourceNames))
		defer giveNames(want)
		for _, n := range req.ResourceNames {
			want[unique1(n)] = true
		}
		drop = func(n name) bool { return !want[n] }
	}
	var ch changeSet
	g.remove(req.TypeURL, drop, &ch)
	g.recheck(&ch, at, round)
	return ch.out
}

// changeSet gathers what one change touched, then what it started and ended.
type changeSet struct {
	owners              map[owner]bool
	allClusters         bool // every cluster's endpoints and secrets
	allListeners        bool
	allRoutes           bool
	removedOwners       []owner
	out                 []Change
	clustersChanged     bool
	routeConfigsChanged bool
}

func (c *changeSet) touch(o owner) {
	if c.owners == nil {
		c.owners = borrowOwners(0)
	}
	c.owners[o] = true
}

// apply makes one resource of an accepted push part of the client's state.
func (g *Graph) apply(typeURL string, r *scanned, ch *changeSet) {
	if r.kept && g.has(typeURL, r.name) {
		// As it was: what it refers to is checked when that changes.
		return
	}
	// A resource kept that the graph lacks is kept by its name alone.
	switch typeURL {
	case codec.TypeCluster:
		n := g.nodes[r.name]
		if n.flags&isCluster == 0 {
			ch.clustersChanged = true
		}
		g.unindex(r.name, &n)
		n.flags &^= needsEndpoints
		n.flags |= isCluster
		n.config, n.extra = r.cluster.config, nil
		if r.cluster.endpoints != noName {
			n.flags |= needsEndpoints
		}
		if (r.cluster.endpoints != noName && r.cluster.endpoints != r.name) || len(r.cluster.secrets) > 0 {
			n.extra = &clusterExtra{secrets: r.cluster.secrets}
			if r.cluster.endpoints != r.name {
				n.extra.service = r.cluster.endpoints
				set(&g.byService, n.extra.service, append(g.byService[n.extra.service], r.name))
			}
		}
		g.ownNodes()
		g.nodes[r.name] = n
		if !ch.allClusters {
			ch.touch(owner{'c', r.name})
		}
	case codec.TypeListener:
		var refs listenerRefs
		if r.listener != nil {
			refs = *r.listener
		}
		set(&g.listeners, r.name, refs)
		ch.touch(owner{'l', r.name})
	case codec.TypeRoute:
		if _, ok := g.routes[r.name]; !ok {
			ch.routeConfigsChanged = true
		}
		set(&g.routes, r.name, r.routes)
		ch.touch(owner{'r', r.name})
	case codec.TypeEndpoint:
		n := g.nodes[r.name]
		n.flags |= hasAssignment
		n.flags &^= endpointsElsewhere
		if r.assignment.elsewhere {
			n.flags |= endpointsElsewhere
		}
		n.endpoints, n.healthy = r.assignment.endpoints, r.assignment.healthy
		g.ownNodes()
		g.nodes[r.name] = n
		g.touchUsers(r.name, ch)
	case codec.TypeSecret:
		if _, ok := g.secrets[r.name]; !ok {
			ch.allClusters, ch.allListeners = true, true
		}
		set(&g.secrets, r.name, struct{}{})
	}
}

// remove drops the resources of a type that drop selects.
func (g *Graph) remove(typeURL string, drop func(name) bool, ch *changeSet) {
	switch typeURL {
	case codec.TypeCluster:
		for n, x := range g.nodes {
			if x.flags&isCluster != 0 && drop(n) {
				g.unindex(n, &x)
				x.flags &^= isCluster | needsEndpoints
				x.config, x.extra = noName, nil
				g.store(n, x)
				ch.clustersChanged = true
				ch.removedOwners = append(ch.removedOwners, owner{'c', n})
			}
		}
	case codec.TypeListener:
		for n := range g.listeners {
			if drop(n) {
				delete(g.listeners, n)
				ch.removedOwners = append(ch.removedOwners, owner{'l', n})
			}
		}
	case codec.TypeRoute:
		for n := range g.routes {
			if drop(n) {
				delete(g.routes, n)
				ch.routeConfigsChanged = true
				ch.removedOwners = append(ch.removedOwners, owner{'r', n})
			}
		}
	case codec.TypeEndpoint:
		for n, x := range g.nodes {
			if x.flags&hasAssignment != 0 && drop(n) {
				x.flags &^= hasAssignment | endpointsElsewhere
				x.endpoints, x.healthy = 0, 0
				g.store(n, x)
				g.touchUsers(n, ch)
			}
		}
	case codec.TypeSecret:
		for n := range g.secrets {
			if drop(n) {
				delete(g.secrets, n)
				ch.allClusters, ch.allListeners = true, true
			}
		}
	}
}

// store keeps a node, or forgets it when it is neither cluster nor
// assignment.
func (g *Graph) store(n name, x node) {
	g.ownNodes()
	if x.flags&(isCluster|hasAssignment) == 0 {
		g.endWait(&x)
		delete(g.nodes, n)
		return
	}
	g.nodes[n] = x
}

// unindex takes a cluster out of byService.
func (g *Graph) unindex(n name, x *node) {
	if x.extra == nil || x.extra.service == noName {
		return
	}
	users := slices.DeleteFunc(g.byService[x.extra.service], func(u name) bool { return u == n })
	if len(users) == 0 {
		delete(g.byService, x.extra.service)
	} else {
		set(&g.byService, x.extra.service, users)
	}
}

// touchUsers marks for a check the clusters whose endpoints an assignment
// holds.
func (g *Graph) touchUsers(service name, ch *changeSet) {
	if x, ok := g.nodes[service]; ok && x.flags&needsEndpoints != 0 && x.service(service) == service {
		ch.touch(owner{'c', service})
	}
	for _, c := range g.byService[service] {
		ch.touch(owner{'c', c})
	}
}

// recheck checks the owners a change touched and gathers what started and
// ended.
func (g *Graph) recheck(ch *changeSet, at time.Time, round uint64) {
	for _, o := range ch.removedOwners {
		g.settle(o, nil, at, round, ch)
	}
	if ch.clustersChanged {
		ch.allListeners, ch.allRoutes = true, true
	}
	if ch.routeConfigsChanged {
		ch.allListeners = true
	}
	if ch.allListeners {
		for n := range g.listeners {
			ch.touch(owner{'l', n})
		}
	}
	if ch.allRoutes {
		for n := range g.routes {
			ch.touch(owner{'r', n})
		}
	}
	found := foundPool.Get().(*[]openFinding)
	if ch.allClusters {
		// Every cluster, read from the graph rather than marked one by one
		// first: an initial sync's 40,000 clusters were a map of their own
		// at the push's peak.
		for n, x := range g.nodes {
			if x.flags&isCluster != 0 {
				o := owner{'c', n}
				*found = g.check(o, (*found)[:0])
				g.settle(o, *found, at, round, ch)
			}
		}
	}
	for o := range ch.owners {
		if ch.allClusters && o.typ == 'c' && g.nodes[o.n].flags&isCluster != 0 {
			continue // checked above
		}
		*found = g.check(o, (*found)[:0])
		g.settle(o, *found, at, round, ch)
	}
	clear(*found)
	foundPool.Put(found)
	if ch.owners != nil {
		clear(ch.owners)
		ownerPool.Put(ch.owners)
		ch.owners = nil
	}
	g.compactWaits()
	g.openPeak = max(g.openPeak, len(g.open))
	if len(g.open) == 0 && g.openPeak > 64 {
		g.open, g.openPeak = map[owner][]*openFinding{}, 0
	}
	slices.SortFunc(ch.out, func(a, b Change) int { return compareFindings(a.Finding, b.Finding) })
}

// check returns the dangling references of an owner, Since and Round unset.
func (g *Graph) check(o owner, out []openFinding) []openFinding {
	switch o.typ {
	case 'c':
		c, ok := g.nodes[o.n]
		if !ok || c.flags&isCluster == 0 {
			return out
		}
		if c.flags&needsEndpoints != 0 && !istioOwn(o.n.Value()) {
			service := c.service(o.n)
			a := g.nodes[service]
			switch {
			case a.flags&hasAssignment == 0:
				f := Finding{Kind: ClusterEndpoints, OwnerType: codec.ShortCluster, Owner: o.n.Value(), Config: str(c.config), Target: service.Value()}
				out = append(out, openFinding{Finding: f, target: service})
			case a.healthy == 0 && a.flags&endpointsElsewhere == 0:
				f := Finding{Kind: ClusterUnhealthy, OwnerType: codec.ShortCluster, Owner: o.n.Value(), Config: str(c.config), Target: service.Value(), Endpoints: int(a.endpoints)}
				out = append(out, openFinding{Finding: f, target: service, immediate: true})
			}
		}
		if secrets := c.secrets(); len(secrets) > 0 {
			out = g.checkSecrets(Finding{OwnerType: codec.ShortCluster, Owner: o.n.Value(), Config: str(c.config)}, secrets, out)
		}
	case 'l':
		l, ok := g.listeners[o.n]
		if !ok {
			return out
		}
		base := Finding{OwnerType: codec.ShortListener, Owner: o.n.Value(), Config: str(l.config)}
		for _, rc := range l.routeConfigs {
			if _, ok := g.routes[rc]; !ok {
				f := base
				f.Kind, f.Target = ListenerRoute, rc.Value()
				out = append(out, openFinding{Finding: f, target: rc})
			}
		}
		out = g.checkRoutes(base, l.routes, out)
		if g.accepted.has(codec.TypeCluster) {
			for _, t := range l.tcp {
				if g.hasCluster(t.cluster) || (t.total != 0 && t.weight == 0) {
					continue
				}
				f := base
				f.Kind, f.Target, f.Weight, f.TotalWeight = ListenerCluster, t.cluster.Value(), t.weight, t.total
				out = append(out, openFinding{Finding: f, target: t.cluster, immediate: !g.explicitClusters})
			}
		}
		out = g.checkSecrets(base, l.secrets, out)
	case 'r':
		refs, ok := g.routes[o.n]
		if !ok {
			return out
		}
		out = g.checkRoutes(Finding{OwnerType: codec.ShortRoute, Owner: o.n.Value()}, refs, out)
	}
	return out
}

func (g *Graph) checkRoutes(base Finding, refs []routeRef, out []openFinding) []openFinding {
	if !g.accepted.has(codec.TypeCluster) {
		return out
	}
	for _, r := range refs {
		if g.hasCluster(r.cluster) || (r.total != 0 && r.weight == 0) || g.istiodPort80(r) {
			continue
		}
		f := base
		f.Kind, f.Target, f.Weight, f.TotalWeight = RouteCluster, r.cluster.Value(), r.weight, r.total
		f.RouteConfig, f.VirtualHost, f.Route = str(r.routeConfig), str(r.virtualHost), str(r.route)
		if c := str(r.config); c != "" {
			f.Config = c
		}
		out = append(out, openFinding{Finding: f, target: r.cluster, immediate: !g.explicitClusters})
	}
	return out
}

func (g *Graph) checkSecrets(base Finding, secrets []name, out []openFinding) []openFinding {
	for _, s := range secrets {
		if _, ok := g.secrets[s]; !ok {
			f := base
			f.Kind, f.Target = Secret, s.Value()
			out = append(out, openFinding{Finding: f, target: s})
		}
	}
	return out
}

func (g *Graph) hasCluster(n name) bool {
	if x, ok := g.nodes[n]; ok && x.flags&isCluster != 0 {
		return true
	}
	return istioOwn(n.Value())
}

// istiodPort80 reports whether a route is one istiod puts in its port-80
// route configuration for a VirtualService whose host has no service on port
// 80: istiod gives every VirtualService a virtual host HOST:80 there
// (pilot/pkg/networking/core/httproute.go, "hack to keep consistent with
// previous behavior"), routed to outbound|80|SUBSET|HOST clusters it never
// makes, since nothing serves HOST on port 80. A request would have to call
// HOST on a port it does not serve; the proxy has no outbound|80||HOST.
func (g *Graph) istiodPort80(r routeRef) bool {
	if str(r.routeConfig) != "80" {
		return false
	}
	host, ok := strings.CutSuffix(str(r.virtualHost), ":80")
	if !ok {
		return false
	}
	p := strings.Split(r.cluster.Value(), "|")
	if len(p) != 4 || p[0] != "outbound" || p[1] != "80" || p[3] != host {
		return false
	}
	return !g.hasCluster(canon.Make("outbound|80||" + host))
}

// istioOwn reports whether a cluster is one istiod makes for its own
// purposes, which a route may name whether or not it was sent.
func istioOwn(cluster string) bool {
	return cluster == "BlackHoleCluster" || cluster == "PassthroughCluster" || strings.HasPrefix(cluster, "InboundPassthroughCluster")
}

// present reports whether a finding's target is there now.
func (g *Graph) present(f *openFinding) bool {
	switch f.Kind {
	case RouteCluster, ListenerCluster:
		return g.hasCluster(f.target)
	case ListenerRoute:
		_, ok := g.routes[f.target]
		return ok
	case ClusterEndpoints:
		return g.nodes[f.target].flags&hasAssignment != 0
	case ClusterUnhealthy:
		a := g.nodes[f.target]
		return a.flags&hasAssignment != 0 && (a.healthy > 0 || a.flags&endpointsElsewhere != 0)
	case Secret:
		_, ok := g.secrets[f.target]
		return ok
	}
	return false
}

// settle replaces an owner's open findings with those found now.
func (g *Graph) settle(o owner, found []openFinding, at time.Time, round uint64, ch *changeSet) {
	old := g.open[o]
	for i := range found {
		found[i].setKey()
	}
	if o.typ == 'c' {
		found = g.wait(o.n, old, found, at, round)
	}
	for _, f := range old {
		if slices.ContainsFunc(found, func(n openFinding) bool { return n.key == f.key }) {
			continue
		}
		if f.reported {
			g.reported--
			c := Change{Finding: f.Finding, Resolved: true, At: at, Present: g.present(f), Window: at.Sub(f.Since)}
			c.MakeBeforeBreak = f.immediate && c.Present && f.Round == round && round != 0
			ch.out = append(ch.out, c)
		}
	}
	// The same findings as before, in the same order (a changed resource
	// whose references dangle as they did): old stays, updated in place,
	// with nothing allocated; a check of a push that changed 200 clusters
	// waiting for their endpoints is 200 of these.
	same := len(found) == len(old)
	for i := 0; same && i < len(found); i++ {
		same = old[i].key == found[i].key
	}
	var next []*openFinding
	if !same {
		next = make([]*openFinding, 0, len(found))
	}
	for i := range found {
		f := &found[i]
		if j := slices.IndexFunc(old, func(o *openFinding) bool { return o.key == f.key }); j >= 0 {
			// The same reference still dangles: it keeps its start, and
			// takes what the new push says of it (its weight, its object).
			prev := old[j]
			prev.Weight, prev.TotalWeight, prev.Endpoints, prev.Config = f.Weight, f.TotalWeight, f.Endpoints, f.Config
			if !prev.reported {
				// Not said yet: what it is now, reported at once if the
				// proxy uses it at once.
				prev.Kind, prev.immediate = f.Kind, f.immediate
				if f.immediate {
					prev.reported = true
					g.reported++
					ch.out = append(ch.out, Change{Finding: prev.Finding, At: at})
				}
			}
			if !same {
				next = append(next, prev)
			}
			continue
		}
		nf := new(openFinding)
		*nf = *f
		if nf.Since.IsZero() {
			// Not a wait's, which keeps its start.
			nf.Since, nf.Round = at, round
		}
		if nf.immediate {
			nf.reported = true
			g.reported++
			ch.out = append(ch.out, Change{Finding: nf.Finding, At: at})
		} else if d := at.Add(g.grace); g.due.IsZero() || d.Before(g.due) {
			g.due = d
		}
		next = append(next, nf)
	}
	if same {
		return
	}
	if len(next) == 0 {
		delete(g.open, o)
		return
	}
	set(&g.open, o, next)
}

// setKey sets what tells the finding from the owner's others.
func (f *openFinding) setKey() {
	kind := f.Kind
	if kind == ClusterEndpoints {
		// One finding while a cluster has no usable endpoints, whether
		// its assignment is empty or, re-subscribed, on its way again.
		kind = ClusterUnhealthy
	}
	f.key = findingKey{kind, keyName(f.RouteConfig), keyName(f.VirtualHost), keyName(f.Route), f.target}
}

// keyName is s's part of a finding's key: most findings name no route,
// and a check finds every dangling reference again, so an empty one is
// not looked up.
func keyName(s string) name {
	if s == "" {
		return noName
	}
	return unique1(s)
}

// wait keeps in cluster n's node the wait for its assignment that found
// holds, unless it is an open finding already (old), and takes it out of
// found; a wait that ended hands its start to the finding that follows it
// (an assignment came empty). It returns what is left of found.
func (g *Graph) wait(n name, old []*openFinding, found []openFinding, at time.Time, round uint64) []openFinding {
	w := slices.IndexFunc(found, func(f openFinding) bool { return f.Kind == ClusterEndpoints })
	if w >= 0 && !slices.ContainsFunc(old, func(p *openFinding) bool { return p.key == found[w].key }) {
		if x, ok := g.nodes[n]; ok && x.wait == 0 {
			g.startWait(&x, at.UnixNano(), round)
			g.ownNodes()
			g.nodes[n] = x
			if d := at.Add(g.grace); g.due.IsZero() || d.Before(g.due) {
				g.due = d
			}
		}
		return slices.Delete(found, w, w+1)
	}
	x, ok := g.nodes[n]
	if !ok || x.wait == 0 {
		return found
	}
	start := g.waits[x.wait-1]
	g.endWait(&x)
	g.ownNodes()
	g.nodes[n] = x
	for i := range found {
		if f := &found[i]; f.Kind == ClusterUnhealthy {
			f.Since, f.Round = time.Unix(0, start.since), start.round
		}
	}
	return found
}

// startWait starts x's wait, since (Unix nanoseconds) in round: the
// latest start when it is the same, as for every cluster of one check.
func (g *Graph) startWait(x *node, since int64, round uint64) {
	k := len(g.waits) - 1
	if k < 0 || g.waits[k].since != since || g.waits[k].round != round {
		if len(g.waits) == maxWaits {
			g.compactWaits()
		}
		if len(g.waits) < maxWaits {
			g.waits = append(g.waits, clusterWait{since: since, round: round})
		}
		// Else 65,535 starts wait at once: the wait joins the latest,
		// and is reported no earlier than its due.
		k = len(g.waits) - 1
	}
	g.waits[k].n++
	g.waiting++
	x.wait = uint16(k + 1)
}

// endWait ends x's wait, if it waits.
func (g *Graph) endWait(x *node) {
	if x.wait == 0 {
		return
	}
	g.waits[x.wait-1].n--
	g.waiting--
	x.wait = 0
}

// compactWaits lets go of the starts no cluster waits since any more: all
// of them once none waits, else, when the list is full, those ended, the
// waiting nodes renumbered.
func (g *Graph) compactWaits() {
	if g.waiting == 0 {
		g.waits = nil
		return
	}
	if len(g.waits) < maxWaits {
		return
	}
	renumber := make([]uint16, len(g.waits))
	kept := g.waits[:0]
	for i, w := range g.waits {
		if w.n > 0 {
			kept = append(kept, w)
			renumber[i] = uint16(len(kept))
		}
	}
	g.waits = kept
	g.ownNodes()
	for n, x := range g.nodes {
		if x.wait != 0 {
			x.wait = renumber[x.wait-1]
			g.nodes[n] = x
		}
	}
}

// smallPush is the most resources of a push whose maps grow as it is
// applied; a larger one sizes them once: grown from empty, a map of 200
// entries is made six times over, for every proxy of a fan-out.
const smallPush = 16

// foundPool holds the scratch space a check finds an owner's dangling
// references in, shared by every stream's graph.
var foundPool = sync.Pool{New: func() any { return new([]openFinding) }}

// Tick reports the references that have waited for their target longer than
// the grace by now.
func (g *Graph) Tick(now time.Time) []Change {
	defer g.shareNodes()
	g.sharedSinceTick = false
	if g.due.IsZero() || now.Before(g.due) {
		return nil
	}
	var out []Change
	var due time.Time
	for _, fs := range g.open {
		for _, f := range fs {
			if f.reported {
				continue
			}
			if now.Sub(f.Since) >= g.grace {
				f.reported = true
				g.reported++
				out = append(out, Change{Finding: f.Finding, At: now})
			} else if d := f.Since.Add(g.grace); due.IsZero() || d.Before(due) {
				due = d
			}
		}
	}
	out, due = g.waitsDue(now, out, due)
	g.due = due
	slices.SortFunc(out, func(a, b Change) int { return compareFindings(a.Finding, b.Finding) })
	return out
}

// waitsDue makes the clusters' waits that have lasted the grace by now
// findings, reported, and returns them added to out, with due the earliest
// of due and the remaining waits' ends.
func (g *Graph) waitsDue(now time.Time, out []Change, due time.Time) ([]Change, time.Time) {
	if g.waiting == 0 {
		return out, due
	}
	var found []openFinding
	for n, x := range g.nodes {
		if x.wait == 0 {
			continue
		}
		start := g.waits[x.wait-1]
		since := time.Unix(0, start.since)
		if now.Sub(since) < g.grace {
			if d := since.Add(g.grace); due.IsZero() || d.Before(due) {
				due = d
			}
			continue
		}
		o := owner{'c', n}
		found = g.check(o, found[:0])
		i := slices.IndexFunc(found, func(f openFinding) bool { return f.Kind == ClusterEndpoints })
		g.endWait(&x)
		g.ownNodes() // the walk goes on over the map it began with
		g.nodes[n] = x
		if i < 0 {
			// Not waiting any more: a check ends a wait that ends.
			continue
		}
		nf := new(openFinding)
		*nf = found[i]
		nf.setKey()
		nf.Since, nf.Round, nf.reported = since, start.round, true
		set(&g.open, o, append(g.open[o], nf))
		g.reported++
		out = append(out, Change{Finding: nf.Finding, At: now})
	}
	g.compactWaits()
	return out, due
}

// Findings returns the findings reported now, in a stable order.
func (g *Graph) Findings() []Finding {
	out := make([]Finding, 0, g.reported)
	for _, fs := range g.open {
		for _, f := range fs {
			if f.reported {
				out = append(out, f.Finding)
			}
		}
	}
	slices.SortFunc(out, compareFindings)
	return out
}

// reportedCount is how many findings are reported now.
func (g *Graph) reportedCount() int { return g.reported }

func compareFindings(a, b Finding) int {
	for _, c := range [][2]string{{string(a.Kind), string(b.Kind)}, {a.OwnerType, b.OwnerType}, {a.Owner, b.Owner},
		{a.RouteConfig, b.RouteConfig}, {a.VirtualHost, b.VirtualHost}, {a.Route, b.Route}, {a.Target, b.Target}} {
		if n := strings.Compare(c[0], c[1]); n != 0 {
			return n
		}
	}
	return 0
}

// The sets of names and owners one change gathers are borrowed and given
// back: a sync of many streams would otherwise leave them as holes between
// the graphs' long-lived maps, which the heap cannot give back.
var namePool, ownerPool sync.Pool

// borrowNames returns a pooled set, or a new one sized for hint names.
func borrowNames(hint int) map[name]bool {
	if m, ok := namePool.Get().(map[name]bool); ok {
		return m
	}
	return make(map[name]bool, hint)
}

func giveNames(m map[name]bool) {
	clear(m)
	namePool.Put(m)
}

func borrowOwners(hint int) map[owner]bool {
	if m, ok := ownerPool.Get().(map[owner]bool); ok {
		return m
	}
	return make(map[owner]bool, hint)
}

package refgraph

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
)

// Kind is what a dangling reference refers from and to.
type Kind string

const (
	// RouteCluster: a route (RDS, or inline in LDS) sends traffic to a
	// cluster the client was never sent or had removed: Envoy answers 503 NC.
	RouteCluster Kind = "route_cluster"
	// ListenerRoute: an HTTP connection manager waits for a route
	// configuration (RDS) that never came or was removed.
	ListenerRoute Kind = "listener_route"
	// ListenerCluster: a TCP proxy sends connections to a cluster not in CDS.
	ListenerCluster Kind = "listener_cluster"
	// ClusterEndpoints: an EDS cluster whose assignment never came.
	ClusterEndpoints Kind = "cluster_endpoints"
	// ClusterUnhealthy: an EDS cluster whose assignment has no endpoint that
	// can take traffic: Envoy answers 503 UH.
	ClusterUnhealthy Kind = "cluster_unhealthy"
	// Secret: a cluster or listener names an SDS secret, to come over this
	// stream, that the stream never received.
	Secret Kind = "secret"
)

// Kinds are every Kind, in the order pages show them.
var Kinds = []Kind{RouteCluster, ListenerRoute, ListenerCluster, ClusterEndpoints, ClusterUnhealthy, Secret}

// Finding is one dangling reference of one stream.
type Finding struct {
	Kind Kind
	// OwnerType and Owner are the resource that holds the reference: its
	// short type (cds, lds, rds) and name.
	OwnerType, Owner string
	// RouteConfig, VirtualHost and Route say where a route reference is: the
	// route configuration (the resource itself, or one inline in a listener),
	// its virtual host and the route's name.
	RouteConfig, VirtualHost, Route string
	// Target is what is missing: a cluster, a route configuration, an EDS
	// assignment's name, a secret.
	Target string
	// Weight and TotalWeight: the target's share of a route's (or a TCP
	// proxy's) traffic; TotalWeight is 0 when it takes it all.
	Weight, TotalWeight uint32
	// Endpoints is, for ClusterUnhealthy, how many endpoints the assignment
	// has (none of them can take traffic).
	Endpoints int
	// Config is the Istio object istiod stamped on the owner (a route's
	// VirtualService, a cluster's DestinationRule): its path, as recorded.
	Config string
	// Since is when the client accepted the push that made the reference
	// dangle; Round is that push's round on the stream.
	Since time.Time
	Round uint64
}

// Share is the fraction of the owner's traffic that goes to the target.
func (f Finding) Share() float64 {
	if f.TotalWeight == 0 {
		return 1
	}
	return float64(f.Weight) / float64(f.TotalWeight)
}

// shareText says Share for people: "10%", "all".
func (f Finding) shareText() string {
	if f.TotalWeight == 0 {
		return "all"
	}
	p := f.Share() * 100
	if p == float64(int64(p)) {
		return strconv.FormatInt(int64(p), 10) + "%"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + "%"
}

// Summary is the finding in one sentence, without the object to fix.
func (f Finding) Summary() string {
	switch f.Kind {
	case RouteCluster:
		return fmt.Sprintf("%s sends %s of its traffic to cluster %s, which the proxy does not have: those requests fail with 503 NC",
			f.routeWhere(), f.shareText(), f.Target)
	case ListenerRoute:
		return fmt.Sprintf("listener %s waits for route configuration %s, which the proxy was never sent", f.Owner, f.Target)
	case ListenerCluster:
		share := ""
		if f.TotalWeight != 0 {
			share = " " + f.shareText() + " of"
		}
		return fmt.Sprintf("listener %s's TCP proxy sends%s its connections to cluster %s, which the proxy does not have: they are closed", f.Owner, share, f.Target)
	case ClusterEndpoints:
		return fmt.Sprintf("cluster %s has no endpoints: its EDS assignment %s never came", f.Owner, f.Target)
	case ClusterUnhealthy:
		if f.Endpoints == 0 {
			return fmt.Sprintf("cluster %s has no endpoint: requests to it fail with 503 UH", f.Owner)
		}
		return fmt.Sprintf("cluster %s has %d endpoints, none healthy: requests to it fail with 503 UH (or, in panic mode, go to unhealthy hosts)", f.Owner, f.Endpoints)
	case Secret:
		return fmt.Sprintf("%s %s names SDS secret %s, which the stream never received", ownerWord(f.OwnerType), f.Owner, f.Target)
	}
	return string(f.Kind) + " " + f.Owner + " -> " + f.Target
}

// ResolvedSummary says how a finding ended: present says whether its target
// is there now (rather than the reference gone).
func (f Finding) ResolvedSummary(present bool) string {
	var what string
	switch f.Kind {
	case RouteCluster:
		what = f.routeWhere() + " -> cluster " + f.Target
	case ListenerRoute:
		what = "listener " + f.Owner + " -> route configuration " + f.Target
	case ListenerCluster:
		what = "listener " + f.Owner + " TCP proxy -> cluster " + f.Target
	case ClusterEndpoints, ClusterUnhealthy:
		what = "cluster " + f.Owner + " endpoints"
	case Secret:
		what = ownerWord(f.OwnerType) + " " + f.Owner + " -> secret " + f.Target
	}
	switch {
	case f.Kind == ClusterUnhealthy && present:
		return what + ": a healthy endpoint arrived"
	case f.Kind == ClusterEndpoints && present:
		return what + ": the EDS assignment arrived"
	case present:
		return what + ": the target arrived"
	}
	return what + ": the reference is gone"
}

func (f Finding) routeWhere() string {
	var b strings.Builder
	if f.Route != "" {
		b.WriteString("route ")
		b.WriteString(f.Route)
	} else {
		b.WriteString("a route") // istiod names a route only when its VirtualService does
	}
	b.WriteString(" of virtual host ")
	b.WriteString(f.VirtualHost)
	b.WriteString(" in route configuration ")
	b.WriteString(f.RouteConfig)
	if f.OwnerType == codec.ShortListener {
		b.WriteString(" (inline in listener ")
		b.WriteString(f.Owner)
		b.WriteString(")")
	}
	return b.String()
}

func ownerWord(t string) string {
	switch t {
	case codec.ShortCluster:
		return "cluster"
	case codec.ShortListener:
		return "listener"
	}
	return t
}

// Change is a finding that started or ended.
type Change struct {
	Finding
	// Resolved marks the end of the finding; At is when it started being
	// reported, or ended.
	Resolved bool
	At       time.Time
	// Present says, for a resolved finding, whether its target is there now
	// (rather than the reference gone).
	Present bool
	// MakeBeforeBreak marks a reference resolved in the push round it
	// started in: the control plane pushed it before its target, and the
	// proxy pointed at nothing for Window.
	MakeBeforeBreak bool
	Window          time.Duration
}

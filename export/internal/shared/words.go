package shared

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/refgraph"
)

// ShortTypes is what codec.ShortType returns. What the outputs derive from
// a type (labels, span names) is made once for each: it would be garbage
// for every push.
var ShortTypes = codec.ShortTypes()

// Ms is d in milliseconds, to the microsecond, as the facts of lines and
// spans give latencies.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ObjectPaths are the paths of the Istio objects a NACK's rejected
// resources record, as istiod wrote them; nil when there is no NACK or none.
func ObjectPaths(r *origin.Rejection) []string {
	var paths []string
	for _, o := range r.Objects() {
		paths = append(paths, o.Path)
	}
	return paths
}

// ObjectOf names the Istio object behind a finding: " — from
// VirtualService default/reviews-split", or nothing.
func ObjectOf(f refgraph.Finding) string {
	if o, ok := origin.ParsePath(f.Config); ok {
		return " — from " + o.String()
	}
	return ""
}

// FixHint names the Istio object behind a finding, and, for a subset
// cluster istiod never made, the DestinationRule subset it makes it from.
func FixHint(f refgraph.Finding) string {
	var b strings.Builder
	b.WriteString(ObjectOf(f))
	if f.Kind == refgraph.RouteCluster || f.Kind == refgraph.ListenerCluster {
		// outbound|9080|v2|reviews.default.svc.cluster.local
		if p := strings.Split(f.Target, "|"); len(p) == 4 && p[0] == "outbound" && p[2] != "" {
			fmt.Fprintf(&b, " (istiod makes that cluster from subset %s of a DestinationRule for %s: is it defined?)", p[2], p[3])
		}
	}
	return b.String()
}

// TypeLabel is the short name operators use: CDS, EDS, LDS...
func TypeLabel(typeURL string) string {
	if s := codec.ShortType(typeURL); s != codec.ShortTypeOther {
		if l, ok := typeLabels[s]; ok {
			return l
		}
		return strings.ToUpper(s)
	}
	return codec.TypeName(typeURL)
}

// typeLabels are the labels of the known short types.
var typeLabels = func() map[string]string {
	m := map[string]string{}
	for _, t := range ShortTypes {
		m[t] = strings.ToUpper(t)
	}
	return m
}()

// NodeSuffix is " node=ID" for a line that names a node, or nothing.
func NodeSuffix(id string) string {
	if id == "" {
		return ""
	}
	return " node=" + id
}

// AppendLatency appends export.Latency(d) to b, without allocating for the common
// cases: the live log writes one per push.
func AppendLatency(b []byte, d time.Duration) []byte {
	switch {
	case d < time.Millisecond:
		b = strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 2, 64)
		return append(b, "ms"...)
	case d < time.Second:
		// Whole milliseconds under a second print as Duration.String
		// prints them ("14ms"), without its string.
		if r := d.Round(time.Millisecond); r < time.Second {
			b = strconv.AppendInt(b, int64(r/time.Millisecond), 10)
			return append(b, "ms"...)
		}
		return append(b, d.Round(time.Millisecond).String()...)
	}
	return append(b, d.Round(100*time.Millisecond).String()...)
}

// AppendSize appends export.Size(n) to b.
func AppendSize(b []byte, n int) []byte {
	switch {
	case n >= 1<<20:
		b = strconv.AppendFloat(b, float64(n)/(1<<20), 'f', 1, 64)
		return append(b, "MB"...)
	case n >= 1<<10:
		b = strconv.AppendFloat(b, float64(n)/(1<<10), 'f', 1, 64)
		return append(b, "KB"...)
	}
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, 'B')
}

package rollout

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/origin"
)

// Proxy states in a push round, worst first.
const (
	StateNACKed     = "NACKED"     // the proxy rejected a push of the round
	StateWaiting    = "WAITING"    // a push of the round went unanswered past the tap's --push-timeout
	StateClosed     = "CLOSED"     // the stream ended before the proxy answered
	StateSuperseded = "SUPERSEDED" // a newer push went out before the proxy answered
	StateACKed      = "ACKED"      // the proxy accepted every push of the round
)

var stateOrder = []string{StateNACKed, StateWaiting, StateClosed, StateSuperseded, StateACKed}

// Query is what adstap rollout asks for.
type Query struct {
	Service string        // the taps' service name in Jaeger (OTEL_SERVICE_NAME, "adstap")
	Version string        // a version (xds.version) or a push id (xds.push_id)
	Object  string        // an Istio object, KIND/NAMESPACE/NAME (ParseObject)
	Since   time.Duration // how far back to look
}

// describe is the query in words, for messages.
func (q Query) describe() string {
	switch {
	case q.Object != "":
		return "push rounds that changed " + q.Object
	case strings.Contains(q.Version, " "):
		return fmt.Sprintf("push round %q", q.Version)
	case q.Version != "":
		return fmt.Sprintf("push rounds of version %q", q.Version)
	}
	return "push round"
}

// ParseObject reads an object as rollout names it, KIND/NAMESPACE/NAME,
// with the kind as istiod writes it in paths (destination-rule) or as
// Kubernetes spells it (DestinationRule), and returns it as istiod's
// (destination-rule/shop/reviews).
func ParseObject(s string) (string, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", fmt.Errorf("--object %q: want KIND/NAMESPACE/NAME, e.g. destination-rule/shop/reviews", s)
	}
	kind := parts[0]
	if !strings.Contains(kind, "-") {
		kind = origin.KebabKind(kind)
	}
	return strings.ToLower(kind) + "/" + parts[1] + "/" + parts[2], nil
}

// Report is what adstap rollout prints.
type Report struct {
	Query  string  `json:"query"`
	Rounds []Round `json:"rounds"`
	// Converged is set when every proxy of every round ACKed.
	Converged bool `json:"converged"`
	// Note says when Jaeger's answer was read only in part: past the most
	// spans one read keeps.
	Note string `json:"note,omitempty"`
}

// Round is one push round as the taps saw it reach their proxies.
type Round struct {
	PushID   string    `json:"push_id"`
	Version  string    `json:"version"`
	TraceID  string    `json:"trace_id"`
	FullPush bool      `json:"full_push"`
	Types    []string  `json:"types"`
	Start    time.Time `json:"start"`
	// Objects are the Istio objects the round's pushes changed
	// (KIND/NAMESPACE/NAME), as the spans name them.
	Objects   []string       `json:"istio_config"`
	Counts    map[string]int `json:"proxies_by_state"`
	Reached   int            `json:"proxies_reached"`
	TimeToACK *Quantiles     `json:"time_to_ack,omitempty"`
	// Proxies are problems first, then the slowest to ACK.
	Proxies []Proxy `json:"proxies"`
}

// Quantiles of the proxies' time to ACK, in seconds.
type Quantiles struct {
	P50 float64 `json:"p50_seconds"`
	P99 float64 `json:"p99_seconds"`
	Max float64 `json:"max_seconds"`
}

// Proxy is one proxy in a round.
type Proxy struct {
	// Name is pod.namespace, from the tap's resource attributes
	// (k8s.pod.name, k8s.namespace.name), or the node id.
	Name  string   `json:"name"`
	Node  string   `json:"node_id"`
	State string   `json:"state"`
	Types []string `json:"types"`
	// TypeStates is each type's state: which type did what.
	TypeStates map[string]string `json:"type_states"`
	// NACKs is how many NACKs the proxy sent in the round, a folded
	// episode counting as the NACKs it stands for.
	NACKs int `json:"nacks,omitempty"`
	// TimeToACK is from the round's first push to this proxy to its last
	// ACK, for an ACKED proxy.
	TimeToACK float64 `json:"time_to_ack_seconds,omitempty"`
	// Message, Source and Objects are the NACK's: the proxy's words, where
	// it came from, and the Istio objects of what it rejected.
	Message string   `json:"message,omitempty"`
	Source  string   `json:"source,omitempty"`
	Objects []string `json:"istio_config,omitempty"`
}

// notFoundError is an answer that names nothing: no such service, no such round.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// Read answers q from j: one search (two when it finds nothing, to say what
// there is), and one to check the service first, whatever the number of
// proxies, since every proxy's push of a round is in the round's trace.
func Read(ctx context.Context, j *Jaeger, q Query) (Report, error) {
	services, err := j.services(ctx)
	if err != nil {
		return Report{}, err
	}
	if !slices.Contains(services, q.Service) {
		have := "none"
		if len(services) > 0 {
			slices.Sort(services)
			have = strings.Join(services, ", ")
		}
		return Report{}, &notFoundError{fmt.Sprintf("Jaeger at %s has no spans of service %q (it has: %s): do the taps send spans there (--otlp-endpoint), under another OTEL_SERVICE_NAME (--service)?", j.Target, q.Service, have)}
	}
	var attrs map[string]string // the latest rounds, the latest full push among them
	switch {
	case q.Object != "":
		attrs = map[string]string{"istio.object": q.Object}
	case strings.Contains(q.Version, " "):
		attrs = map[string]string{"xds.push_id": q.Version}
	case q.Version != "":
		attrs = map[string]string{"xds.version": q.Version}
	}
	spans, err := j.find(ctx, q.Service, attrs, q.Since)
	if err != nil {
		return Report{}, err
	}
	rounds := roundsOf(spans)
	if q.Version == "" && q.Object == "" && len(rounds) > 1 {
		rounds = latest(rounds)
	}
	if len(rounds) == 0 {
		return Report{}, notFound(ctx, j, q)
	}
	rep := Report{Query: q.describe(), Rounds: rounds, Converged: true}
	if j.Truncated() > 0 {
		rep.Note = fmt.Sprintf("Jaeger's answer held more than %d spans: read the first %d, the rest were left out (traces written before adstap folded repeated pushes can hold tens of thousands)", j.maxSpans, j.maxSpans)
	}
	for _, r := range rounds {
		if r.Counts[StateACKed] != r.Reached {
			rep.Converged = false
		}
	}
	return rep, nil
}

// latest is the latest full push of rounds (oldest first), else the latest
// round.
func latest(rounds []Round) []Round {
	for i, r := range slices.Backward(rounds) {
		if r.FullPush {
			return rounds[i : i+1]
		}
	}
	return rounds[len(rounds)-1:]
}

// notFound says that nothing answers q, and what the latest rounds were,
// from one more search.
func notFound(ctx context.Context, j *Jaeger, q Query) error {
	msg := fmt.Sprintf("no %s in the last %s of %s's spans in Jaeger at %s", q.describe(), q.Since, q.Service, j.Target)
	if q.Version == "" && q.Object == "" {
		return &notFoundError{msg + "; it holds no push in that time (try --since)"}
	}
	spans, err := j.find(ctx, q.Service, nil, q.Since)
	rounds := roundsOf(spans)
	switch {
	case err != nil:
	case len(rounds) == 0:
		msg += "; it holds no push in that time (try --since)"
	default:
		var versions, objects []string
		for _, r := range slices.Backward(rounds) {
			if len(versions) < 5 && !slices.Contains(versions, r.PushID) {
				versions = append(versions, r.PushID)
			}
			for _, o := range r.Objects {
				if !slices.Contains(objects, o) && len(objects) < 5 {
					objects = append(objects, o)
				}
			}
		}
		msg += "; the latest push rounds: " + strings.Join(versions, ", ")
		if q.Object != "" && len(objects) > 0 {
			msg += "; the objects they changed: " + strings.Join(objects, ", ")
		}
	}
	return &notFoundError{msg}
}

// roundsOf groups push spans into push rounds (by xds.push_id, else the
// version), oldest first, each with its proxies.
func roundsOf(spans []span) []Round {
	type proxyKey struct{ pod, node string }
	type building struct {
		round   Round
		proxies map[proxyKey]*proxyAcc
	}
	byID := map[string]*building{}
	// A tap's pod names its proxy when the tap serves one node, as a
	// sidecar does; a tap in front of many nodes names each by its id.
	podNodes := map[string]map[string]bool{}
	for _, s := range spans {
		if pod := podOf(s); pod != "" {
			if podNodes[pod] == nil {
				podNodes[pod] = map[string]bool{}
			}
			podNodes[pod][s.Attrs["xds.node.id"]] = true
		}
	}
	for _, s := range spans {
		result := s.Attrs["xds.result"]
		if result == "" || !isPushSpan(s) {
			continue
		}
		id := cmp.Or(s.Attrs["xds.push_id"], s.Attrs["xds.version"])
		b := byID[id]
		if b == nil {
			b = &building{round: Round{PushID: id, Version: s.Attrs["xds.version"], TraceID: s.TraceID, Start: s.Start}, proxies: map[proxyKey]*proxyAcc{}}
			byID[id] = b
		}
		r := &b.round
		if s.Start.Before(r.Start) {
			r.Start = s.Start
		}
		r.FullPush = r.FullPush || s.Attrs["xds.full_push"] == "true"
		typ := s.Attrs["xds.type"]
		if !slices.Contains(r.Types, typ) {
			r.Types = append(r.Types, typ)
		}
		for _, e := range s.Events {
			if o := e.Attrs["istio.object"]; o != "" && !slices.Contains(r.Objects, o) {
				r.Objects = append(r.Objects, o)
			}
		}
		node := s.Attrs["xds.node.id"]
		k := proxyKey{node: node}
		name := node
		if pod := podOf(s); pod != "" && len(podNodes[pod]) == 1 {
			k, name = proxyKey{pod: pod}, pod
		}
		p := b.proxies[k]
		if p == nil {
			p = &proxyAcc{Proxy: Proxy{Name: name, Node: node, TypeStates: map[string]string{}}, first: s.Start}
			b.proxies[k] = p
		}
		p.add(s, typ, result)
	}
	var out []Round
	for _, b := range byID {
		r := b.round
		r.Counts = map[string]int{}
		var acks []float64
		for _, p := range b.proxies {
			pr := p.Proxy
			if pr.State == StateACKed {
				pr.TimeToACK = p.last.Sub(p.first).Seconds()
				acks = append(acks, pr.TimeToACK)
			}
			slices.Sort(pr.Types)
			r.Counts[pr.State]++
			r.Proxies = append(r.Proxies, pr)
		}
		r.Reached = len(r.Proxies)
		slices.Sort(r.Types)
		slices.SortFunc(r.Proxies, func(a, b Proxy) int {
			return cmp.Or(
				cmp.Compare(slices.Index(stateOrder, a.State), slices.Index(stateOrder, b.State)),
				-cmp.Compare(a.TimeToACK, b.TimeToACK),
				cmp.Compare(a.Name, b.Name))
		})
		if len(acks) > 0 {
			slices.Sort(acks)
			r.TimeToACK = &Quantiles{P50: quantile(acks, 0.5), P99: quantile(acks, 0.99), Max: acks[len(acks)-1]}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Round) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.PushID, b.PushID)) })
	return out
}

// proxyAcc gathers one proxy's pushes of a round.
type proxyAcc struct {
	Proxy
	first, last time.Time
}

func (p *proxyAcc) add(s span, typ, result string) {
	if !slices.Contains(p.Types, typ) {
		p.Types = append(p.Types, typ)
	}
	if s.Start.Before(p.first) {
		p.first = s.Start
	}
	state := map[string]string{"ack": StateACKed, "nack": StateNACKed, "timeout": StateWaiting, "closed": StateClosed, "superseded": StateSuperseded}[result]
	if state == "" {
		state = StateWaiting
	}
	if state == StateACKed && s.End.After(p.last) {
		p.last = s.End
	}
	if p.State == "" || slices.Index(stateOrder, state) < slices.Index(stateOrder, p.State) {
		p.State = state
	}
	if ts := p.TypeStates[typ]; ts == "" || slices.Index(stateOrder, state) < slices.Index(stateOrder, ts) {
		p.TypeStates[typ] = state
	}
	if state == StateNACKed {
		// A folded episode stands for the NACKs it counts.
		n := 1
		if c, err := strconv.Atoi(s.Attrs["xds.folded.nacks"]); err == nil && s.Attrs["xds.folded.count"] != "" {
			n = c
		}
		p.NACKs += n
	}
	if state == StateNACKed && p.Message == "" {
		var objs []origin.Object
		p.Message, p.Source, objs = nackOf(s)
		for _, o := range objs {
			p.Objects = append(p.Objects, o.Ref())
		}
	}
}

// isPushSpan says whether s is a push span, or an episode span that
// folds pushes ("CDS push (folded)", with xds.folded.count).
func isPushSpan(s span) bool {
	return strings.HasSuffix(s.Name, " push") || s.Attrs["xds.folded.count"] != ""
}

// podOf is the proxy's pod.namespace from the tap's resource attributes,
// "" without them.
func podOf(s span) string {
	pod, ns := s.Resource["k8s.pod.name"], s.Resource["k8s.namespace.name"]
	switch {
	case pod == "":
		return ""
	case ns == "":
		return pod
	}
	return pod + "." + ns
}

// quantile of sorted values, the nearest rank.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

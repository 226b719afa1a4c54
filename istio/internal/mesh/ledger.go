package mesh

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/schema/kind"
)

// EnginePush is one response istiod's engine generated for one proxy, as the
// engine itself saw it: recorded by wrapping the engine's generators, so
// nothing of istiod is re-implemented. The engine sends it right after
// (pilot/pkg/xds/xdsgen.go pushXds, delta.go pushDeltaXds): version_info
// (Delta: system_version_info) is Version and the nonce is Version followed
// by a UUID.
type EnginePush struct {
	At      time.Time
	Proxy   string // istiod's proxy id: WORKLOAD.NAMESPACE (ProxyID)
	TypeURL string
	Version string // the push context's version (req.Push.PushVersion)
	// Full: the push request carried more than endpoint changes (or was
	// forced). istiod's own test of it, model.OnlyHasConfigsOfKind(
	// req.ConfigsUpdated, kind.Endpoints), decides whether it logs the push
	// at info (full) or debug (endpoints only).
	Full bool
	// Request: the response answers the proxy's own request (istiod's log
	// says "PUSH request"), not a push.
	Request bool
	// Incremental is the generator's own verdict (istiod's log says "PUSH
	// INC"): the response carries only what changed.
	Incremental bool
	Delta       bool // generated for a Delta stream
	Resources   int
	Deleted     int // Delta: removals the generator computed
	Reasons     []string
	// Start is when the push request began (PushRequest.Start): what tells
	// two push rounds of one version apart.
	Start time.Time
}

func (p EnginePush) String() string {
	kind := "incremental"
	switch {
	case p.Request:
		kind = "request"
	case p.Full:
		kind = "full"
	}
	return fmt.Sprintf("%s %s v=%s %s res=%d", p.Proxy, shortURL(p.TypeURL), p.Version, kind, p.Resources)
}

func shortURL(u string) string { return u[strings.LastIndexByte(u, '/')+1:] }

// Ledger is every response the engine generated, in order.
type Ledger struct{ feed[EnginePush] }

// All returns every push so far.
func (l *Ledger) All() []EnginePush { return l.all() }

// Since returns the pushes after the first n (n = len of an earlier All).
func (l *Ledger) Since(n int) []EnginePush {
	all := l.All()
	if n > len(all) {
		n = len(all)
	}
	return all[n:]
}

// Len is the number of pushes so far.
func (l *Ledger) Len() int { return len(l.All()) }

// Wait returns once cond holds for the pushes so far, or fails when ctx
// ends first.
func (l *Ledger) Wait(ctx context.Context, cond func([]EnginePush) bool) ([]EnginePush, error) {
	return l.wait(ctx, "the engine's pushes", cond)
}

// feed is a list one goroutine appends to while others wait for a
// condition on it: the engine's ledger, adstap's events.
type feed[T any] struct {
	mu      sync.Mutex
	items   []T
	changed chan struct{} // closed and replaced at every append
}

func (f *feed[T]) add(x T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, x)
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

func (f *feed[T]) all() []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.items)
}

func (f *feed[T]) wait(ctx context.Context, what string, cond func([]T) bool) ([]T, error) {
	for {
		f.mu.Lock()
		items := slices.Clone(f.items)
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		changed := f.changed
		f.mu.Unlock()
		if cond(items) {
			return items, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return items, fmt.Errorf("waiting for %s: %w (%d so far)", what, context.Cause(ctx), len(items))
		}
	}
}

// Round is one push round of the engine to one proxy: every response of one
// push request.
type Round struct {
	Proxy   string
	Version string
	Full    bool
	Request bool
	Types   []string // short type names in the order they were generated
}

// Rounds groups pushes (of any proxies) into rounds, in order of their first
// response.
func Rounds(pushes []EnginePush) []Round {
	type key struct {
		proxy, version string
		full, request  bool
		start          time.Time
	}
	idx := map[key]int{}
	var out []Round
	for _, p := range pushes {
		k := key{p.Proxy, p.Version, p.Full, p.Request, p.Start}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Round{Proxy: p.Proxy, Version: p.Version, Full: p.Full, Request: p.Request})
		}
		out[i].Types = append(out[i].Types, shortURL(p.TypeURL))
	}
	return out
}

// Count tells how many push rounds (not responses) each proxy got: full
// pushes, incremental pushes and answers to its own requests.
type Count struct {
	Full, Incremental, Requests int
}

// CountRounds counts the rounds of pushes by proxy.
func CountRounds(pushes []EnginePush) map[string]Count {
	out := map[string]Count{}
	for _, r := range Rounds(pushes) {
		c := out[r.Proxy]
		switch {
		case r.Request:
			c.Requests++
		case r.Full:
			c.Full++
		default:
			c.Incremental++
		}
		out[r.Proxy] = c
	}
	return out
}

// Versions returns the distinct versions of pushes, sorted.
func Versions(pushes []EnginePush) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range pushes {
		if !seen[p.Version] {
			seen[p.Version] = true
			out = append(out, p.Version)
		}
	}
	sort.Strings(out)
	return out
}

// wrap returns g recording what it generates. A generator that also
// generates deltas keeps doing so: the engine picks the Delta path by the
// generator's type.
func (l *Ledger) wrap(url string, g model.XdsResourceGenerator, withhold func(typeURL, name string) bool) model.XdsResourceGenerator {
	if g == nil {
		return nil
	}
	r := recorder{ledger: l, url: url, gen: g, withhold: withhold}
	if dg, ok := g.(model.XdsDeltaResourceGenerator); ok {
		return deltaRecorder{recorder: r, delta: dg}
	}
	return r
}

type recorder struct {
	ledger   *Ledger
	url      string
	gen      model.XdsResourceGenerator
	withhold func(typeURL, name string) bool
}

// held leaves out of res what EngineOptions.Withhold says to.
func (r recorder) held(w *model.WatchedResource, res model.Resources) model.Resources {
	if r.withhold == nil || res == nil {
		return res
	}
	url := r.url
	if w != nil && w.TypeUrl != "" {
		url = w.TypeUrl
	}
	out := model.Resources{}
	for _, x := range res {
		if !r.withhold(url, x.Name) {
			out = append(out, x)
		}
	}
	return out
}

func (r recorder) Generate(proxy *model.Proxy, w *model.WatchedResource, req *model.PushRequest) (model.Resources, model.XdsLogDetails, error) {
	res, details, err := r.gen.Generate(proxy, w, req)
	res = r.held(w, res)
	// pushXds sends exactly when there is no error and res is not nil.
	if err == nil && res != nil {
		r.record(proxy, w, req, details, len(res), 0, false)
	}
	return res, details, err
}

func (r recorder) record(proxy *model.Proxy, w *model.WatchedResource, req *model.PushRequest, d model.XdsLogDetails, n, deleted int, delta bool) {
	p := EnginePush{
		At: time.Now(), Proxy: proxy.ID, TypeURL: r.url, Full: !model.OnlyHasConfigsOfKind(req.ConfigsUpdated, kind.Endpoints), Request: req.IsRequest(),
		Incremental: d.Incremental, Delta: delta, Resources: n, Deleted: deleted, Start: req.Start,
	}
	if w != nil && w.TypeUrl != "" {
		p.TypeURL = w.TypeUrl
	}
	if req.Push != nil {
		p.Version = req.Push.PushVersion
	}
	for reason := range req.Reason {
		p.Reasons = append(p.Reasons, string(reason))
	}
	sort.Strings(p.Reasons)
	r.ledger.add(p)
}

type deltaRecorder struct {
	recorder
	delta model.XdsDeltaResourceGenerator
}

func (r deltaRecorder) GenerateDeltas(proxy *model.Proxy, req *model.PushRequest, w *model.WatchedResource) (model.Resources, model.DeletedResources, model.XdsLogDetails, bool, error) {
	res, deleted, details, used, err := r.delta.GenerateDeltas(proxy, req, w)
	res = r.held(w, res)
	// pushDeltaXds sends unless there is an error or nothing at all.
	if err == nil && (res != nil || deleted != nil) {
		r.record(proxy, w, req, details, len(res), len(deleted), true)
	}
	return res, deleted, details, used, err
}

package track_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// These tests give the tracker the bytes of each push, as pipeline.Observer
// does, in buffers of a pool that scribbles over what is given back to it:
// a tracker or a Rejected reading bytes it let go of would read garbage.

// istioConfig is the metadata istiod stamps on what it builds from the
// object at path (pilot/pkg/networking/util.AddConfigInfoMetadata).
func istioConfig(path string) *corev3.Metadata {
	parts := strings.Split(path, "/") // "", apis, group, version, namespaces, ns, kind, name
	return xdsconfig.IstioConfig(parts[6], parts[5], parts[7])
}

const (
	drPath    = "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews-maglev"
	vsPath    = "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/reviews"
	scPath    = "/apis/networking.istio.io/v1/namespaces/shop/sidecar/default"
	ratingsVS = "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/ratings"
)

func stampedCluster(name, path string) proto.Message {
	c := cluster(name).(*clusterv3.Cluster)
	c.LbPolicy = clusterv3.Cluster_MAGLEV
	c.Metadata = istioConfig(path)
	return c
}

// scribblingPool counts the buffers given back to it and overwrites them.
type scribblingPool struct {
	mu  sync.Mutex
	put int
}

// Get returns at least 4 KB: gRPC does not pool smaller buffers.
func (p *scribblingPool) Get(n int) *[]byte { b := make([]byte, n, max(n, 4096)); return &b }

func (p *scribblingPool) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.put++
	for i := range *b {
		(*b)[i] = 0xff
	}
}

func (p *scribblingPool) returned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.put
}

// keepHarness drives one tracker with real frames, handing it each
// response's buffer as the tap does (and freeing the tap's own reference
// right after).
type keepHarness struct {
	t    *testing.T
	tr   *track.Tracker
	pool *scribblingPool
	at   int
}

func newKeepHarness(t *testing.T, cfg track.Config, method string, takers ...func(*track.Tracker)) *keepHarness {
	h := &keepHarness{t: t, tr: track.New(cfg), pool: &scribblingPool{}}
	for _, take := range takers {
		take(h.tr) // before any stream, as the pipeline registers its outputs
	}
	h.tr.OpenStream(track.StreamMeta{ID: 1, Method: method, OpenedAt: t0})
	return h
}

// wantLetGo checks that the tracker holds no bytes any more and that n
// buffers have gone back to the pool.
func (h *keepHarness) wantLetGo(n int) {
	h.t.Helper()
	if got := h.tr.Kept().Bytes; got != 0 {
		h.t.Errorf("%d bytes still kept", got)
	}
	h.wantReturned(n)
}

// wantReturned checks that n buffers have gone back to the pool.
func (h *keepHarness) wantReturned(n int) {
	h.t.Helper()
	if got := h.pool.returned(); got != n {
		h.t.Errorf("%d buffers returned to the pool, want %d", got, n)
	}
}

func (h *keepHarness) send(m proto.Message) []track.Event {
	h.t.Helper()
	return h.sendStream(1, m)
}

// sendStream sends m on stream id.
func (h *keepHarness) sendStream(id uint64, m proto.Message) []track.Event {
	h.t.Helper()
	h.at++
	b, err := proto.Marshal(m)
	if err != nil {
		h.t.Fatal(err)
	}
	switch m.(type) {
	case *discoveryv3.DiscoveryRequest, *discoveryv3.DeltaDiscoveryRequest:
		_, delta := m.(*discoveryv3.DeltaDiscoveryRequest)
		req, err := codec.DecodeRequest(b, delta)
		if err != nil {
			h.t.Fatal(err)
		}
		return h.tr.Request(id, h.now(), req, len(b))
	default:
		_, delta := m.(*discoveryv3.DeltaDiscoveryResponse)
		buf := h.pool.Get(len(b))
		copy(*buf, b)
		data := mem.BufferSlice{mem.NewBuffer(buf, h.pool)}
		var resp codec.Response
		if err := resp.DecodeBuffers(data, delta); err != nil {
			h.t.Fatal(err)
		}
		evs := h.tr.ResponseFrame(id, h.now(), &resp, len(b), data)
		data.Free() // the tap's reference
		return evs
	}
}

func (h *keepHarness) now() time.Time { return t0.Add(time.Duration(h.at) * 10 * ms) }

// rejectedBy returns what the PushEnded NACK among evs rejected.
func rejectedBy(t *testing.T, evs []track.Event) *track.Rejected {
	t.Helper()
	for _, e := range evs {
		if e, ok := e.(track.PushEnded); ok && e.Result == track.ResultNACK {
			if e.Rejected == nil {
				t.Fatal("a NACK's PushEnded has no Rejected")
			}
			return e.Rejected
		}
	}
	t.Fatalf("no NACK among %v", describeAll(evs, true))
	return nil
}

type rejectedResource struct {
	Name      string
	Objects   []string
	Unchanged bool
}

func resourcesOf(t *testing.T, r *track.Rejected) []rejectedResource {
	t.Helper()
	res, err := origin.Of(r).Resources()
	if err != nil {
		t.Fatalf("Resources: %v", err)
	}
	var out []rejectedResource
	for _, x := range res {
		rr := rejectedResource{Name: x.Name, Unchanged: x.Unchanged}
		for _, o := range x.Objects {
			rr.Objects = append(rr.Objects, o.String())
		}
		out = append(out, rr)
	}
	return out
}

const (
	maglev         = "outbound|9080||reviews.shop.example.com"
	ratingsCluster = "outbound|9080||ratings.shop.svc.cluster.local"
)

func TestNACKNamesTheIstioObjects(t *testing.T) {
	leakcheck.Check(t)
	vhost := func(name string, routes ...*routev3.Route) *routev3.VirtualHost {
		return &routev3.VirtualHost{Name: name, Domains: []string{name}, Routes: routes}
	}
	vsRoute := &routev3.Route{Name: "reviews.shop", Metadata: istioConfig(vsPath),
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}
	tests := []struct {
		name    string
		method  string
		typeURL string
		push    proto.Message
		nack    proto.Message
		want    []rejectedResource
		summary string
	}{{
		name:    "a cluster built from a DestinationRule, named by the message",
		method:  adsSotW,
		typeURL: cds,
		push:    push(cds, 1, stampedCluster(maglev, drPath), cluster(ratingsCluster)),
		nack:    nack(cds, 1, 0, "CDS response: resource "+maglev+": unexpected lbPolicy MAGLEV"),
		want:    []rejectedResource{{Name: maglev, Objects: []string{"DestinationRule shop/reviews-maglev"}}},
		summary: "from DestinationRule shop/reviews-maglev",
	}, {
		name:    "a cluster without Istio metadata says so",
		method:  adsSotW,
		typeURL: cds,
		push:    push(cds, 1, stampedCluster(maglev, drPath), cluster(ratingsCluster)),
		nack:    nack(cds, 1, 0, "Error adding/updating cluster(s) "+ratingsCluster+": bad"),
		want:    []rejectedResource{{Name: ratingsCluster}},
		summary: "no Istio config recorded in " + ratingsCluster,
	}, {
		name:    "a message naming no resource puts the whole push under suspicion",
		method:  adsSotW,
		typeURL: cds,
		push:    push(cds, 1, stampedCluster(maglev, drPath), cluster(ratingsCluster)),
		nack:    nack(cds, 1, 0, "something went wrong"),
		want:    []rejectedResource{{Name: maglev, Objects: []string{"DestinationRule shop/reviews-maglev"}}, {Name: ratingsCluster}},
		summary: "the message names no resource; the push comes from DestinationRule shop/reviews-maglev",
	}, {
		name:    "a route configuration records its VirtualService on each route",
		method:  adsSotW,
		typeURL: rds,
		push: push(rds, 1, &routev3.RouteConfiguration{Name: "9080", VirtualHosts: []*routev3.VirtualHost{
			vhost("allow_any", &routev3.Route{Name: "allow_any", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}),
			vhost("reviews.shop.svc.cluster.local:9080", vsRoute),
		}}),
		nack:    nack(rds, 1, 0, "route config 9080: bad regex"),
		want:    []rejectedResource{{Name: "9080", Objects: []string{"VirtualService shop/reviews"}}},
		summary: "from VirtualService shop/reviews",
	}, {
		name:    "a route configuration gathers the VirtualServices of its port",
		method:  adsSotW,
		typeURL: rds,
		push: push(rds, 1, &routev3.RouteConfiguration{Name: "9080", VirtualHosts: []*routev3.VirtualHost{
			vhost("reviews.shop.svc.cluster.local:9080", vsRoute),
			vhost("ratings.shop.svc.cluster.local:9080", &routev3.Route{Name: "ratings.shop", Metadata: istioConfig(ratingsVS),
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}}),
		}}),
		nack:    nack(rds, 1, 0, "route config 9080: RE2 program size of 157 > max program size of 100"),
		want:    []rejectedResource{{Name: "9080", Objects: []string{"VirtualService shop/reviews", "VirtualService shop/ratings"}}},
		summary: "from one of VirtualService shop/reviews, VirtualService shop/ratings",
	}, {
		name:    "a message naming a route of the configuration narrows it to that route's VirtualService",
		method:  adsSotW,
		typeURL: rds,
		push: push(rds, 1, &routev3.RouteConfiguration{Name: "9080", VirtualHosts: []*routev3.VirtualHost{
			vhost("reviews.shop.svc.cluster.local:9080", vsRoute),
			vhost("ratings.shop.svc.cluster.local:9080", &routev3.Route{Name: "ratings.shop", Metadata: istioConfig(ratingsVS),
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{}}}),
		}}),
		nack:    nack(rds, 1, 0, `resource "9080": route "ratings.shop" contains an invalid regex "/v1/(["`),
		want:    []rejectedResource{{Name: "9080", Objects: []string{"VirtualService shop/ratings"}}},
		summary: "from VirtualService shop/ratings",
	}, {
		name:    "a Delta listener records its Sidecar on a filter chain",
		method:  adsDelta,
		typeURL: lds,
		push: dpush(lds, 1, nil, &listenerv3.Listener{Name: "virtualInbound", Address: socket("0.0.0.0", 15006),
			FilterChains: []*listenerv3.FilterChain{{Name: "inbound|9080||", Metadata: istioConfig(scPath)}}}),
		nack:    dnack(lds, 1, "Error adding/updating listener(s) virtualInbound: duplicate"),
		want:    []rejectedResource{{Name: "virtualInbound", Objects: []string{"Sidecar shop/default"}}},
		summary: "from Sidecar shop/default",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newKeepHarness(t, track.Config{}, tt.method)
			if tt.method == adsDelta {
				h.send(dinitial(tt.typeURL))
			} else {
				h.send(initial(tt.typeURL))
			}
			h.send(tt.push)
			if h.tr.Kept().Bytes == 0 {
				t.Fatal("the unanswered push is not kept")
			}
			r := rejectedBy(t, h.send(tt.nack))
			if diff := cmp.Diff(tt.want, resourcesOf(t, r)); diff != "" {
				t.Errorf("rejected resources (-want +got):\n%s", diff)
			}
			if got := origin.Of(r).Summary(); got != tt.summary {
				t.Errorf("Summary() = %q, want %q", got, tt.summary)
			}
			h.wantLetGo(1)
			if got := typeState(t, h.tr, 1, tt.typeURL).LastRejected; got != r {
				t.Errorf("the type's state holds %p as its last rejection, want the NACK's %p", got, r)
			}
		})
	}
}

func TestKeptPushIsReleased(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name string
		then func(h *keepHarness)
	}{
		{"by its ACK", func(h *keepHarness) { h.send(ack(cds, 1)) }},
		{"by a newer push", func(h *keepHarness) { h.send(push(cds, 2, cluster(ratingsCluster))); h.send(ack(cds, 2)) }},
		{"by the end of its stream", func(h *keepHarness) { h.tr.CloseStream(1, h.now(), 0, "") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newKeepHarness(t, track.Config{}, adsSotW)
			h.send(initial(cds))
			h.send(push(cds, 1, stampedCluster(maglev, drPath)))
			tt.then(h)
			if got := h.tr.Kept(); got.Bytes != 0 || got.Skipped != 0 {
				t.Errorf("Kept() = %+v, want nothing held or skipped", got)
			}
			pushes := strings.Count(tt.name, "newer") + 1
			h.wantReturned(pushes)
		})
	}
}

func TestKeepBound(t *testing.T) {
	leakcheck.Check(t)
	big := push(cds, 1, stampedCluster(maglev, drPath))
	h := newKeepHarness(t, track.Config{KeepBytes: int64(proto.Size(big)) - 1}, adsSotW)
	h.send(initial(cds))
	h.send(big)
	if got := h.tr.Kept(); got.Bytes != 0 || got.Skipped != 1 {
		t.Fatalf("Kept() = %+v, want 0 bytes and 1 push skipped", got)
	}
	r := rejectedBy(t, h.send(nack(cds, 1, 0, "resource "+maglev+": unexpected lbPolicy MAGLEV")))
	if _, err := origin.Of(r).Resources(); !errors.Is(err, origin.ErrNotKept) {
		t.Errorf("Resources() error = %v, want ErrNotKept", err)
	}
	if got, want := origin.Of(r).Summary(), "Istio source unknown: the rejected push was not kept: adstap's bound"; !strings.HasPrefix(got, want) {
		t.Errorf("Summary() = %q, want it to start with %q", got, want)
	}

	off := newKeepHarness(t, track.Config{KeepBytes: -1}, adsSotW)
	off.send(initial(cds))
	off.send(big)
	if got := off.tr.Kept(); got.Bytes != 0 || got.Skipped != 0 {
		t.Errorf("with keeping off, Kept() = %+v, want nothing", got)
	}
}

// A control plane re-sending a rejected push (a NACK loop) gets one
// Rejection for the lot: its push is decoded once, and the copies are let go.
func TestNACKLoopSharesItsRejection(t *testing.T) {
	leakcheck.Check(t)
	h := newKeepHarness(t, track.Config{}, adsSotW)
	h.send(initial(cds))
	msg := "resource " + maglev + ": unexpected lbPolicy MAGLEV"
	var first *track.Rejected
	for n := 1; n <= 3; n++ {
		h.send(push(cds, n, stampedCluster(maglev, drPath)))
		r := rejectedBy(t, h.send(nack(cds, n, 0, msg)))
		if first == nil {
			first = r
			if got := origin.Of(first).Summary(); got != "from DestinationRule shop/reviews-maglev" {
				t.Fatalf("Summary() = %q", got)
			}
		} else if r != first {
			t.Errorf("NACK %d of the same content has a Rejection of its own", n)
		}
	}
	h.wantLetGo(3)
}

// A NACK that comes after its push timed out still names what it rejected:
// the push stays kept while it is the latest.
func TestLateNACKNamesTheIstioObjects(t *testing.T) {
	leakcheck.Check(t)
	h := newKeepHarness(t, track.Config{PushTimeout: time.Second}, adsSotW)
	h.send(initial(cds))
	h.send(push(cds, 1, stampedCluster(maglev, drPath)))
	h.tr.Tick(h.now().Add(2 * time.Second))
	h.at += 300
	var late *track.LateAnswer
	for _, e := range h.send(nack(cds, 1, 0, "resource "+maglev+": unexpected lbPolicy MAGLEV")) {
		if e, ok := e.(track.LateAnswer); ok {
			late = &e
		}
	}
	if late == nil || late.Result != track.ResultNACK {
		t.Fatalf("no late NACK: %+v", late)
	}
	if got, want := origin.Of(late.Rejected).Summary(), "from DestinationRule shop/reviews-maglev"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

// A NACK no output asks about (its log line throttled, tracing off) does not
// keep its push: the tracker lets go of it when it forgets the NACK.
func TestUnreadRejectionIsReleased(t *testing.T) {
	leakcheck.Check(t)
	for _, then := range []struct {
		name     string
		returned int // buffers given back to the pool: the NACKed push's, and the next one's
		do       func(h *keepHarness)
	}{
		{"by the next ACK", 2, func(h *keepHarness) {
			h.send(push(cds, 2, cluster(ratingsCluster)))
			h.send(ack(cds, 2))
		}},
		{"by a NACK of other content", 2, func(h *keepHarness) {
			h.send(push(cds, 2, stampedCluster(ratingsCluster, drPath)))
			origin.Of(rejectedBy(h.t, h.send(nack(cds, 2, 0, "resource "+ratingsCluster+": unexpected lbPolicy MAGLEV"))))
		}},
		{"by the end of the stream", 1, func(h *keepHarness) { h.tr.CloseStream(1, h.now(), 0, "") }},
	} {
		t.Run(then.name, func(t *testing.T) {
			h := newKeepHarness(t, track.Config{}, adsSotW)
			h.send(initial(cds))
			h.send(push(cds, 1, stampedCluster(maglev, drPath)))
			unread := rejectedBy(t, h.send(nack(cds, 1, 0, "resource "+maglev+": unexpected lbPolicy MAGLEV")))
			if h.tr.Kept().Bytes == 0 {
				t.Fatal("the NACKed push is not kept for its outputs")
			}
			then.do(h)
			h.wantLetGo(then.returned)
			if got, want := origin.Of(unread).Summary(), "Istio source unknown: the rejected push was not kept: adstap let go of it before any output asked"; got != want {
				t.Errorf("read late, Summary() = %q, want %q", got, want)
			}
		})
	}
}

// shopCluster is the name of the i-th cluster of the pushes below.
func shopCluster(i int) string { return fmt.Sprintf("outbound|9080||svc%d.shop.svc.cluster.local", i) }

// shopClusters are eight clusters as istiod pushes them: the first built
// from a DestinationRule asking for Maglev where changed (a change the
// client rejects), the second always stamped with a VirtualService;
// changed lists the others that changed since version 1.
func shopClusters(maglev bool, changed ...int) []proto.Message {
	var out []proto.Message
	for i := range 8 {
		name := shopCluster(i)
		switch {
		case i == 0 && maglev:
			out = append(out, stampedCluster(name, drPath))
		case i == 1:
			c := cluster(name).(*clusterv3.Cluster)
			c.Metadata = istioConfig(vsPath)
			out = append(out, c)
		case slices.Contains(changed, i):
			out = append(out, clusterV2(name))
		default:
			out = append(out, cluster(name))
		}
	}
	return out
}

// dshop is shopClusters as a Delta push of the resources at indexes.
func dshop(n int, all []proto.Message, indexes ...int) *discoveryv3.DeltaDiscoveryResponse {
	var res []proto.Message
	for _, i := range indexes {
		res = append(res, all[i])
	}
	return dpush(cds, n, nil, res...)
}

// What a push leaves for its NACK: a first push or a large change is held
// as it came, by reference; a small change is copied, and the buffers it
// came in are given back right away.
func TestKeptForm(t *testing.T) {
	leakcheck.Check(t)
	v1 := push(cds, 1, shopClusters(false)...)
	oneChanged := func(n int) *discoveryv3.DiscoveryResponse { return push(cds, n, shopClusters(true)...) }
	tests := []struct {
		name   string
		method string
		frames []proto.Message // the last one is the push looked at
		// compact: the push is copied, in at most a quarter of its bytes;
		// otherwise it is held as it came.
		compact bool
		// returned: buffers given back to the pool once the last push is in.
		returned int
	}{{
		name:   "a first push",
		method: adsSotW, frames: []proto.Message{initial(cds), v1},
		returned: 0,
	}, {
		name:   "one resource of eight changed",
		method: adsSotW, frames: []proto.Message{initial(cds), v1, ack(cds, 1), oneChanged(2)},
		compact: true, returned: 2,
	}, {
		name:   "five of eight changed",
		method: adsSotW, frames: []proto.Message{initial(cds), v1, ack(cds, 1), push(cds, 2, shopClusters(true, 2, 3, 4, 5)...)},
		returned: 1,
	}, {
		name:   "a small change after an unanswered push, which may have been rejected",
		method: adsSotW, frames: []proto.Message{initial(cds), v1, ack(cds, 1), oneChanged(2), push(cds, 3, shopClusters(true, 2)...)},
		returned: 2,
	}, {
		name:   "a small change once a full push after it is acknowledged",
		method: adsSotW, frames: []proto.Message{initial(cds), v1, ack(cds, 1), oneChanged(2), push(cds, 3, shopClusters(true, 2)...),
			ack(cds, 3), push(cds, 4, shopClusters(true, 2, 3)...)},
		compact: true, returned: 4,
	}, {
		name:   "a small change re-sent after its NACK",
		method: adsSotW, frames: []proto.Message{initial(cds), v1, ack(cds, 1), oneChanged(2), nack(cds, 2, 1, "bad"), oneChanged(3)},
		compact: true, returned: 3,
	}, {
		name:   "a Delta push of the changes alone",
		method: adsDelta, frames: []proto.Message{dinitial(cds), dshop(1, shopClusters(false), 0, 1, 2, 3, 4, 5, 6, 7), dack(cds, 1),
			dshop(2, shopClusters(true), 0)},
		returned: 1,
	}, {
		name:   "a Delta push re-sending what did not change",
		method: adsDelta, frames: []proto.Message{dinitial(cds), dshop(1, shopClusters(false), 0, 1, 2, 3, 4, 5, 6, 7), dack(cds, 1),
			dshop(2, shopClusters(true), 0, 1, 2, 3, 4, 5, 6, 7)},
		compact: true, returned: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newKeepHarness(t, track.Config{}, tt.method)
			for _, f := range tt.frames {
				for _, e := range h.send(f) {
					if e, ok := e.(track.PushEnded); ok {
						origin.Of(e.Rejected) // as an output would, letting go of it
					}
				}
			}
			size := int64(proto.Size(tt.frames[len(tt.frames)-1]))
			got := h.tr.Kept().Bytes
			if compact := got < size; compact != tt.compact || got <= 0 || compact && got*4 > size {
				t.Errorf("kept %d bytes of a push of %d, want compact %v (at most a quarter) ", got, size, tt.compact)
			}
			h.wantReturned(tt.returned)
			h.tr.CloseStream(1, h.now(), 0, "")
			if got := h.tr.Kept().Bytes; got != 0 {
				t.Errorf("after the stream's end, %d bytes kept", got)
			}
		})
	}
}

// A NACK can only reject what the push changed: a resource it names that
// the push carried unchanged is said to be no culprit, and a NACK naming
// none suspects only what changed. So whichever form the push was kept in.
func TestNACKOfAChange(t *testing.T) {
	leakcheck.Check(t)
	c0, c1 := shopCluster(0), shopCluster(1)
	const unchanged = ", unchanged since the last accepted version: not what was rejected"
	maglevObjects := []string{"DestinationRule shop/reviews-maglev"}
	for _, form := range []struct {
		name    string
		push    *discoveryv3.DiscoveryResponse
		changed []rejectedResource // what a NACK naming none suspects
		notes   string             // what its Summary adds
	}{{
		name:    "one of eight changed, kept compact",
		push:    push(cds, 2, shopClusters(true)...),
		changed: []rejectedResource{{Name: c0, Objects: maglevObjects}},
		notes:   " (the 7 resources the push carried unchanged since the last accepted version are not suspected)",
	}, {
		name: "five of eight changed, kept whole",
		push: push(cds, 2, shopClusters(true, 2, 3, 4, 5)...),
		changed: []rejectedResource{{Name: c0, Objects: maglevObjects},
			{Name: shopCluster(2)}, {Name: shopCluster(3)}, {Name: shopCluster(4)}, {Name: shopCluster(5)}},
		notes: " (the 3 resources the push carried unchanged since the last accepted version are not suspected)",
	}} {
		tests := []struct {
			name    string
			message string
			want    []rejectedResource
			summary string
		}{{
			name:    "naming the changed resource",
			message: "resource " + c0 + ": unexpected lbPolicy MAGLEV",
			want:    []rejectedResource{{Name: c0, Objects: maglevObjects}},
			summary: "from DestinationRule shop/reviews-maglev",
		}, {
			name:    "naming an unchanged resource",
			message: "resource " + c1 + ": bad",
			want:    []rejectedResource{{Name: c1, Unchanged: true}},
			summary: "Istio source unknown: the message names only " + c1 + unchanged,
		}, {
			name:    "naming both",
			message: c0 + " refers to " + c1,
			want:    []rejectedResource{{Name: c0, Objects: maglevObjects}, {Name: c1, Unchanged: true}},
			summary: "from DestinationRule shop/reviews-maglev; " + c1 + ", also named, is" + unchanged[1:],
		}, {
			name:    "naming none",
			message: "something went wrong",
			want:    form.changed,
			summary: "the message names no resource; what the push changed comes from DestinationRule shop/reviews-maglev" + form.notes,
		}}
		for _, tt := range tests {
			t.Run(form.name+"/"+tt.name, func(t *testing.T) {
				h := newKeepHarness(t, track.Config{}, adsSotW)
				h.send(initial(cds))
				h.send(push(cds, 1, shopClusters(false)...))
				h.send(ack(cds, 1))
				h.send(form.push)
				r := rejectedBy(t, h.send(nack(cds, 2, 1, tt.message)))
				if diff := cmp.Diff(tt.want, resourcesOf(t, r)); diff != "" {
					t.Errorf("rejected resources (-want +got):\n%s", diff)
				}
				if got := origin.Of(r).Summary(); got != tt.summary {
					t.Errorf("Summary() =\n%q, want\n%q", got, tt.summary)
				}
				h.wantLetGo(2)
			})
		}
	}
}

// Config.KeepBytes bounds what is kept, in whichever form.
func TestKeepBoundOnACompactPush(t *testing.T) {
	leakcheck.Check(t)
	v2 := push(cds, 2, shopClusters(true)...)
	for _, tt := range []struct {
		name      string
		bound     func(compact int64) int64
		kept      bool
		returned  int
		wantError bool
	}{
		{name: "within the bound", bound: func(c int64) int64 { return c }, kept: true, returned: 2},
		{name: "past it", bound: func(c int64) int64 { return c - 1 }, returned: 2, wantError: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// How much the compact form takes, measured with no bound.
			probe := newKeepHarness(t, track.Config{}, adsSotW)
			for _, f := range []proto.Message{initial(cds), push(cds, 1, shopClusters(false)...), ack(cds, 1), v2} {
				probe.send(f)
			}
			compact := probe.tr.Kept().Bytes
			probe.tr.CloseStream(1, probe.now(), 0, "")
			if compact*4 > int64(proto.Size(v2)) {
				t.Fatalf("the push is kept in %d bytes of its %d, not compact", compact, proto.Size(v2))
			}

			// The first push, whole, is over the bound: it is not kept.
			h := newKeepHarness(t, track.Config{KeepBytes: tt.bound(compact)}, adsSotW)
			for _, f := range []proto.Message{initial(cds), push(cds, 1, shopClusters(false)...), ack(cds, 1), v2} {
				h.send(f)
			}
			if got, want := h.tr.Kept(), (track.KeptStats{Bytes: compact, Skipped: 1}); tt.kept && got != want {
				t.Errorf("Kept() = %+v, want %+v", got, want)
			} else if !tt.kept && got != (track.KeptStats{Skipped: 2}) {
				t.Errorf("Kept() = %+v, want nothing held and 2 pushes skipped", got)
			}
			h.wantReturned(tt.returned)
			_, err := origin.Of(rejectedBy(t, h.send(nack(cds, 2, 1, "resource "+shopCluster(0)+": unexpected lbPolicy MAGLEV")))).Resources()
			if gotError := errors.Is(err, origin.ErrNotKept); gotError != tt.wantError {
				t.Errorf("Resources() error = %v, want ErrNotKept %v", err, tt.wantError)
			}
		})
	}
}

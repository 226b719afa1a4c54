package xdstest

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/controlplane"
)

// ControlPlane is a go-control-plane v3 server with an ADS snapshot cache.
// It records every request it receives so tests can wait for ACKs and NACKs
// without writing callbacks.
type ControlPlane struct {
	*controlplane.ControlPlane
	lis net.Listener

	forget  bool // WithoutRecording
	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a request is recorded
	sotw    []*discovery.DiscoveryRequest
	delta   []*discovery.DeltaDiscoveryRequest
}

// callbacksOption smuggles go-control-plane callbacks through the
// ...grpc.ServerOption parameter; grpc.EmptyServerOption exists for exactly
// this kind of embedding.
type callbacksOption struct {
	grpc.EmptyServerOption
	cb server.Callbacks
}

// WithCallbacks makes StartControlPlane invoke cb (typically a
// server.CallbackFuncs) for every stream event. Callbacks run synchronously
// on the stream's goroutine, so one that blocks stalls its stream and makes
// Stop (and cleanup) hang. An error returned from a request callback closes
// that stream, which is one way to fail an upstream mid-stream.
func WithCallbacks(cb server.Callbacks) grpc.ServerOption {
	return callbacksOption{cb: cb}
}

// withoutRecording is WithoutRecording's option.
type withoutRecording struct{ grpc.EmptyServerOption }

// WithoutRecording makes StartControlPlane keep nothing of what it
// receives (Requests and the WaitFor methods then see nothing): in a loop of
// thousands of NACKs a second, recorded requests are memory a test would
// blame on the tap.
func WithoutRecording() grpc.ServerOption { return withoutRecording{} }

// StartControlPlane serves ADS and the per-type LDS/RDS/CDS/EDS/SDS services,
// SotW and Delta, on lis. opts are passed to grpc.NewServer, except those
// made by WithCallbacks.
func StartControlPlane(t testing.TB, lis net.Listener, opts ...grpc.ServerOption) *ControlPlane {
	t.Helper()
	var user []server.Callbacks
	forget := false
	// WaitForHandlers makes Stop block until every stream handler returned,
	// so no go-control-plane goroutine outlives the test (goleak) and no
	// callback fires after cleanup.
	srvOpts := []grpc.ServerOption{grpc.WaitForHandlers(true)}
	for _, o := range opts {
		if c, ok := o.(callbacksOption); ok {
			user = append(user, c.cb)
			continue
		}
		if _, ok := o.(withoutRecording); ok {
			forget = true
			continue
		}
		srvOpts = append(srvOpts, o)
	}

	cp := &ControlPlane{lis: lis, changed: make(chan struct{}), forget: forget}
	var stopped atomic.Bool
	cp.ControlPlane = controlplane.Start(context.Background(), lis, controlplane.Config{
		Callbacks:     &recorder{cp: cp, user: user},
		Log:           testLogger{t: t, stopped: &stopped},
		ServerOptions: srvOpts,
		PerType:       true,
	})
	t.Cleanup(func() {
		cp.Stop()
		stopped.Store(true)
	})
	return cp
}

// Target is the address in a form grpc.NewClient and grpc-go's bootstrap
// server_uri accept.
func (cp *ControlPlane) Target() string { return Target(cp.lis.Addr()) }

// SetSnapshot publishes resources under version to nodeID. Streams already
// open get the new version pushed; resources of types not in the map are
// removed. The snapshot is not checked for consistency so tests can send
// partial or dangling sets on purpose.
func (cp *ControlPlane) SetSnapshot(t testing.TB, nodeID, version string, resources map[resource.Type][]types.Resource) {
	t.Helper()
	cp.SetSnapshotFor(t, version, resources, nodeID)
}

// SetSnapshotFor is SetSnapshot of one snapshot for every node of nodeIDs.
func (cp *ControlPlane) SetSnapshotFor(t testing.TB, version string, resources map[resource.Type][]types.Resource, nodeIDs ...string) {
	t.Helper()
	if err := cp.Set(version, resources, nodeIDs...); err != nil {
		t.Fatalf("xdstest: %v", err)
	}
}

// Requests returns copies of every SotW DiscoveryRequest received so far,
// from all streams, in arrival order.
func (cp *ControlPlane) Requests() []*discovery.DiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), cp.sotw...)
}

// WaitForRequest returns the first SotW request (already received or still
// to come) that match accepts, or fails the test after timeout. Use it with
// IsNACK to wait for a rejection.
func (cp *ControlPlane) WaitForRequest(t testing.TB, timeout time.Duration, match func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	return waitFor(t, cp, timeout, func() []*discovery.DiscoveryRequest { return cp.sotw }, match)
}

// WaitForDeltaRequest is WaitForRequest for Delta streams.
func (cp *ControlPlane) WaitForDeltaRequest(t testing.TB, timeout time.Duration, match func(*discovery.DeltaDiscoveryRequest) bool) *discovery.DeltaDiscoveryRequest {
	t.Helper()
	return waitFor(t, cp, timeout, func() []*discovery.DeltaDiscoveryRequest { return cp.delta }, match)
}

// IsNACK reports whether a SotW or Delta request rejects a response: per the
// xDS protocol that is exactly "error_detail is set".
func IsNACK(req interface{ GetErrorDetail() *rpcstatus.Status }) bool {
	return req.GetErrorDetail() != nil
}

func waitFor[R any](t testing.TB, cp *ControlPlane, timeout time.Duration, list func() []R, match func(R) bool) R {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for seen := 0; ; {
		cp.mu.Lock()
		reqs, changed := list(), cp.changed
		cp.mu.Unlock()
		for ; seen < len(reqs); seen++ {
			if match(reqs[seen]) {
				return reqs[seen]
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("xdstest: no matching request within %v (%d seen)", timeout, seen)
			var zero R
			return zero
		}
	}
}

func (cp *ControlPlane) recordSotW(req *discovery.DiscoveryRequest) {
	cp.record(func() { cp.sotw = append(cp.sotw, proto.Clone(req).(*discovery.DiscoveryRequest)) })
}

func (cp *ControlPlane) recordDelta(req *discovery.DeltaDiscoveryRequest) {
	cp.record(func() { cp.delta = append(cp.delta, proto.Clone(req).(*discovery.DeltaDiscoveryRequest)) })
}

// record runs add under the lock, unless recording is off, and wakes
// whoever waits for a change.
func (cp *ControlPlane) record(add func()) {
	if cp.forget {
		return
	}
	cp.mu.Lock()
	add()
	close(cp.changed)
	cp.changed = make(chan struct{})
	cp.mu.Unlock()
}

// recorder records requests, then forwards every callback to the user's.
type recorder struct {
	server.CallbackFuncs // no-ops for what is not overridden below
	cp                   *ControlPlane
	user                 []server.Callbacks
}

// each calls call with every user callback in turn, and joins their errors.
func (r *recorder) each(call func(server.Callbacks) error) error {
	var errs []error
	for _, u := range r.user {
		errs = append(errs, call(u))
	}
	return errors.Join(errs...)
}

func (r *recorder) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return r.each(func(u server.Callbacks) error { return u.OnStreamOpen(ctx, id, typeURL) })
}

func (r *recorder) OnStreamClosed(id int64, node *core.Node) {
	r.each(func(u server.Callbacks) error { u.OnStreamClosed(id, node); return nil })
}

func (r *recorder) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	return r.each(func(u server.Callbacks) error { return u.OnDeltaStreamOpen(ctx, id, typeURL) })
}

func (r *recorder) OnDeltaStreamClosed(id int64, node *core.Node) {
	r.each(func(u server.Callbacks) error { u.OnDeltaStreamClosed(id, node); return nil })
}

func (r *recorder) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	r.cp.recordSotW(req)
	return r.each(func(u server.Callbacks) error { return u.OnStreamRequest(id, req) })
}

func (r *recorder) OnStreamResponse(ctx context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	r.each(func(u server.Callbacks) error { u.OnStreamResponse(ctx, id, req, resp); return nil })
}

func (r *recorder) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	r.cp.recordDelta(req)
	return r.each(func(u server.Callbacks) error { return u.OnStreamDeltaRequest(id, req) })
}

func (r *recorder) OnStreamDeltaResponse(id int64, req *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	r.each(func(u server.Callbacks) error { u.OnStreamDeltaResponse(id, req, resp); return nil })
}

func (r *recorder) OnFetchRequest(ctx context.Context, req *discovery.DiscoveryRequest) error {
	return r.each(func(u server.Callbacks) error { return u.OnFetchRequest(ctx, req) })
}

func (r *recorder) OnFetchResponse(req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	r.each(func(u server.Callbacks) error { u.OnFetchResponse(req, resp); return nil })
}

// testLogger surfaces go-control-plane's warnings and errors in the test
// log, which is where a misbehaving snapshot shows up first. Debug and info
// are dropped: the cache logs every watch. Logging stops at cleanup because
// t.Logf panics once the test has finished.
type testLogger struct {
	t       testing.TB
	stopped *atomic.Bool
}

var _ log.Logger = testLogger{}

func (testLogger) Debugf(string, ...any) {}
func (testLogger) Infof(string, ...any)  {}
func (l testLogger) Warnf(format string, args ...any) {
	if !l.stopped.Load() {
		l.t.Logf("go-control-plane: warn: "+format, args...)
	}
}
func (l testLogger) Errorf(format string, args ...any) {
	if !l.stopped.Load() {
		l.t.Logf("go-control-plane: error: "+format, args...)
	}
}

package mesh

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/security"
)

// DefaultDebounce is istiod's PILOT_DEBOUNCE_AFTER: changes closer together
// than this become one push.
const DefaultDebounce = 100 * time.Millisecond

// EngineOptions say what the engine starts with.
type EngineOptions struct {
	// ConfigString is Istio configuration (ServiceEntry, VirtualService,
	// DestinationRule, ...) as YAML.
	ConfigString string
	// KubernetesObjectString is Kubernetes objects (Services, EndpointSlices,
	// Pods) as YAML.
	KubernetesObjectString string
	// Debounce defaults to DefaultDebounce, as istiod runs.
	Debounce time.Duration
	// Addr is the address to listen on; empty picks a loopback port. A
	// restarted engine listens where the one it replaces did.
	Addr string
	// Withhold, when set, is a fault: the engine leaves out of what it
	// sends every resource for which it returns true (an update that never
	// comes, as envoy#21425 and istio#38709 meet).
	Withhold func(typeURL, name string) bool
}

// Engine is istiod's xDS engine (pilot/test/xds.FakeDiscoveryServer)
// serving ADS on a real loopback listener, with a record of every response
// it generated (Pushes) and of the metadata each stream arrived with
// (Headers).
type Engine struct {
	*xds.FakeDiscoveryServer
	// Addr is where the engine listens (host:port).
	Addr string
	// Pushes is the engine's own account of what it sent.
	Pushes *Ledger
	// Headers is the metadata of every stream the engine's authenticators
	// saw; empty unless AuthenticatePlaintext was called.
	Headers  *HeaderLog
	lis      *engineListener
	debounce time.Duration
}

// StartEngine starts istiod's engine. It stops when the test ends.
func StartEngine(t *testing.T, opts EngineOptions) *Engine {
	t.Helper()
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("engine: listening on %s: %v", addr, err)
	}
	// Accepting waits until the generators are wrapped: the engine reads
	// them on its connections' goroutines.
	el := &engineListener{Listener: lis, open: make(chan struct{}), closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	f := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{
		ConfigString:           opts.ConfigString,
		KubernetesObjectString: opts.KubernetesObjectString,
		DebounceTime:           opts.Debounce,
		ListenerBuilder:        func() (net.Listener, error) { return el, nil },
	})
	e := &Engine{FakeDiscoveryServer: f, Addr: lis.Addr().String(), Pushes: &Ledger{}, Headers: &HeaderLog{}, lis: el, debounce: opts.Debounce}
	for url, g := range f.Discovery.Generators {
		f.Discovery.Generators[url] = e.Pushes.wrap(url, g, opts.Withhold)
	}
	f.Discovery.Authenticators = append(f.Discovery.Authenticators, e.Headers)
	close(el.open)
	t.Cleanup(e.Stop)
	return e
}

// Stop is the engine's process dying: every connection is cut and the
// listener closed, without a goodbye. The address can be listened on again
// by a new engine (EngineOptions.Addr).
func (e *Engine) Stop() { e.lis.stop() }

// AuthenticatePlaintext makes istiod run its authenticators on plaintext
// streams too (istiod's XDS_AUTH_PLAINTEXT), which is how an engine records
// the metadata each stream arrived with (Engine.Headers). Call it from the
// test package's init, before any engine serves: it sets a variable istiod
// reads on every stream.
func AuthenticatePlaintext() { security.AuthPlaintext = true }

// engineListener hands the engine its connections once it is ready, and
// cuts them all when the engine "dies".
type engineListener struct {
	net.Listener
	open   chan struct{}
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

// errClosed reads "closed": what FakeDiscoveryServer's serving goroutine
// takes for a normal end.
var errClosed = errors.New("closed")

func (l *engineListener) Accept() (net.Conn, error) {
	select {
	case <-l.open:
	case <-l.closed:
		return nil, errClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, errClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		c.Close()
		return nil, errClosed
	default:
	}
	l.conns[c] = struct{}{}
	return c, nil
}

func (l *engineListener) Close() error {
	l.stop()
	return nil
}

func (l *engineListener) stop() {
	l.once.Do(func() {
		l.mu.Lock()
		close(l.closed)
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.Listener.Close()
	})
}

// HeaderLog records the metadata of every stream istiod authenticated. It is
// an authenticator that vouches for everyone as the default service account
// of the default namespace, the namespace of the harness's proxies.
type HeaderLog struct {
	mu   sync.Mutex
	seen []metadata.MD
}

var _ security.Authenticator = (*HeaderLog)(nil)

// Identity is the identity HeaderLog vouches for.
const Identity = "spiffe://cluster.local/ns/default/sa/default"

// Authenticate records the stream's metadata.
func (h *HeaderLog) Authenticate(ctx security.AuthContext) (*security.Caller, error) {
	if ctx.GrpcContext != nil {
		md, _ := metadata.FromIncomingContext(ctx.GrpcContext)
		h.mu.Lock()
		h.seen = append(h.seen, md.Copy())
		h.mu.Unlock()
	}
	return &security.Caller{AuthSource: security.AuthSourceIDToken, Identities: []string{Identity}}, nil
}

// AuthenticatorType names the authenticator in istiod's messages.
func (h *HeaderLog) AuthenticatorType() string { return "adstap-test-header-log" }

// Streams returns the metadata of every stream so far, oldest first.
func (h *HeaderLog) Streams() []metadata.MD {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]metadata.MD, len(h.seen))
	copy(out, h.seen)
	return out
}

// Connections returns the proxies connected to the engine by proxy id
// (ProxyID), with
// the nonce the engine last sent and last saw acknowledged for each type
// (istiod's own WatchedResource, what istioctl proxy-status reads).
func (e *Engine) Connections() map[string]map[string]Watched {
	out := map[string]map[string]Watched{}
	for _, c := range e.Discovery.AllClients() {
		p := c.Proxy()
		if p == nil {
			continue
		}
		types := map[string]Watched{}
		for url, w := range p.DeepCloneWatchedResources() {
			types[url] = Watched{NonceSent: w.NonceSent, NonceAcked: w.NonceAcked, LastError: w.LastError}
		}
		out[p.ID] = types
	}
	return out
}

// Watched is one type of one proxy as istiod tracks it.
type Watched struct {
	NonceSent, NonceAcked, LastError string
}

// PushVersion is the version of the engine's current push context: the
// version_info of its next request-driven response.
func (e *Engine) PushVersion() string { return e.PushContext().PushVersion }

package export

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3" // so every core type can be shown
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"context"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
	"log/slog"
)

// ConfigStore keeps, per stream and type, the resources the client has
// accepted, for GET /debug/config. The tap otherwise keeps only hashes, so
// this is opt-in (--retain-resources) and bounded by a byte budget; past it
// new pushes are not retained and the page says so.
//
// It is told the bytes of each push (Response) and, as a track.Sink, the
// tracker's verdict on it; the wiring hands it a push's bytes before the
// tracker can judge the push's answer. Decoding and copying pushes happens
// on a goroutine of its own, behind a bounded queue: a push that does not
// fit is dropped, counted (adstap_output_dropped_total{output="config"}),
// and the page says it is incomplete.
type ConfigStore struct {
	maxBytes int64
	q        *queue[configOp]

	mu      sync.Mutex
	used    int64
	full    bool
	streams map[uint64]*retainedStream
}

type retainedStream struct {
	protocol codec.Protocol
	types    map[string]*retainedType
}

type retainedType struct {
	version  string
	accepted map[string]retained
	pending  map[string]pendingPush // by nonce
}

type retained struct {
	typeURL string
	body    []byte
}

type pendingPush struct {
	version   string
	resources map[string]retained
	removed   []string
	replace   bool
}

var _ track.Sink = (*ConfigStore)(nil)

// configOp is one call to the store, done on its queue's goroutine.
type configOp struct {
	kind     uint8 // opOpen, opResponse, opClose, opAnswer
	stream   uint64
	protocol codec.Protocol
	data     mem.BufferSlice // a response's bytes, by reference
	push     track.Push
	accepted bool
}

const (
	opOpen = iota
	opResponse
	opClose
	opAnswer
)

// NewConfigStore retains at most maxBytes of resource bodies, with at most
// maxQueueBytes of pushes waiting to be retained (DefaultOutputQueueBytes
// when 0). Close stops it.
func NewConfigStore(maxBytes, maxQueueBytes int64, log *slog.Logger) *ConfigStore {
	c := &ConfigStore{maxBytes: maxBytes, streams: map[uint64]*retainedStream{}}
	c.q = newQueue("config", maxQueueBytes, c.do, warnLost(log, "config", "pushes"), func(op configOp) {
		if op.data != nil {
			op.data.Free()
		}
	})
	return c
}

func (c *ConfigStore) do(op configOp) {
	switch op.kind {
	case opOpen:
		c.openStream(op.stream, op.protocol)
	case opResponse:
		c.response(op.stream, op.data)
		op.data.Free()
	case opClose:
		c.closeStream(op.stream)
	case opAnswer:
		c.applyAnswer(op.push, op.accepted)
	}
}

// OpenStream starts retaining what stream id is pushed.
func (c *ConfigStore) OpenStream(id uint64, p codec.Protocol) {
	if p != codec.Opaque {
		c.q.put(configOp{kind: opOpen, stream: id, protocol: p}, 64, true)
	}
}

// Response hands over the bytes of one push (a whole response as it crossed
// the tap, in the buffers it arrived in), kept until the tracker judges its
// answer. It takes its own reference to data, and copies only the
// resources' bodies, once its goroutine gets to them: a push is never
// copied whole. It never waits: a push that does not fit in the queue, or
// is larger than all the store retains, is lost.
func (c *ConfigStore) Response(id uint64, data mem.BufferSlice) {
	n := data.Len()
	if int64(n) > c.maxBytes {
		c.mu.Lock()
		c.full = true
		c.mu.Unlock()
		return
	}
	data.Ref()
	if !c.q.put(configOp{kind: opResponse, stream: id, data: data}, n, false) {
		data.Free()
		c.mu.Lock()
		c.full = true
		c.mu.Unlock()
	}
}

// CloseStream forgets stream id and what it retained.
func (c *ConfigStore) CloseStream(id uint64) { c.q.put(configOp{kind: opClose, stream: id}, 64, true) }

// OnEvent applies a push once the tracker says how it ended.
func (c *ConfigStore) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.PushEnded:
		c.q.put(configOp{kind: opAnswer, push: e.Push, accepted: e.Result == track.ResultACK}, 256, true)
	case track.LateAnswer:
		c.q.put(configOp{kind: opAnswer, push: e.Push, accepted: e.Result == track.ResultACK}, 256, true)
	}
}

// Dropped counts the pushes dropped because the queue was full.
func (c *ConfigStore) Dropped() uint64 { return c.q.Dropped() }

// Close stops retaining, once what waits is retained or ctx is done.
func (c *ConfigStore) Close(ctx context.Context) error { return c.q.close(ctx) }

func (c *ConfigStore) openStream(id uint64, p codec.Protocol) {
	if p == codec.Opaque {
		return
	}
	c.mu.Lock()
	c.streams[id] = &retainedStream{protocol: p, types: map[string]*retainedType{}}
	c.mu.Unlock()
}

// response keeps the bodies of one push until its answer.
func (c *ConfigStore) response(id uint64, data mem.BufferSlice) {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st == nil {
		return
	}
	var resp codec.Response
	if err := resp.DecodeBuffers(data, st.protocol == codec.Delta); err != nil {
		return
	}
	p := pendingPush{version: resp.VersionInfo, resources: make(map[string]retained, len(resp.Resources)), removed: resp.RemovedResources}
	// In SotW, LDS and CDS responses carry the whole set; other types add to it.
	p.replace = !resp.Delta && (resp.TypeURL == codec.TypeListener || resp.TypeURL == codec.TypeCluster)
	var size int64
	for _, r := range resp.Resources {
		p.resources[string(r.Name)] = retained{typeURL: string(r.TypeURL), body: append([]byte(nil), r.Body...)}
		size += int64(len(r.Body))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[id] != st {
		return // closed meanwhile
	}
	if c.used+size > c.maxBytes {
		c.full = true
		return
	}
	c.used += size
	t := st.types[resp.TypeURL]
	if t == nil {
		t = &retainedType{accepted: map[string]retained{}, pending: map[string]pendingPush{}}
		st.types[resp.TypeURL] = t
	}
	t.pending[resp.Nonce] = p
}

func (c *ConfigStore) closeStream(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		for _, t := range st.types {
			c.used -= t.bytes()
		}
		delete(c.streams, id)
	}
}

// applyAnswer applies a push once the tracker says how it ended.
func (c *ConfigStore) applyAnswer(p track.Push, accepted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streams[p.StreamID]
	if st == nil || st.types[p.TypeURL] == nil {
		return
	}
	t := st.types[p.TypeURL]
	push, ok := t.pending[p.Nonce]
	if !ok {
		return
	}
	delete(t.pending, p.Nonce)
	before := t.bytes() + push.bytes()
	if accepted {
		if push.replace {
			t.accepted = map[string]retained{}
		}
		for name, r := range push.resources {
			t.accepted[name] = r
		}
		for _, name := range push.removed {
			delete(t.accepted, name)
		}
		t.version = push.version
	}
	c.used -= before - t.bytes()
}

func (t *retainedType) bytes() int64 {
	var n int64
	for _, r := range t.accepted {
		n += int64(len(r.body))
	}
	for _, p := range t.pending {
		n += p.bytes()
	}
	return n
}

func (p pendingPush) bytes() int64 {
	var n int64
	for _, r := range p.resources {
		n += int64(len(r.body))
	}
	return n
}

// ConfigPage is the body of GET /debug/config.
type ConfigPage struct {
	Stream    uint64            `json:"stream"`
	TypeURL   string            `json:"type_url"`
	Version   string            `json:"version"`
	Resources []json.RawMessage `json:"resources"`
	// Incomplete says retention stopped at its byte budget.
	Incomplete bool `json:"incomplete,omitempty"`
}

// Handler serves GET /debug/config?stream=ID&type=cds (a short name or a
// type URL): the resources the stream's client accepted, decoded and with
// every secret replaced by its fingerprint.
func (c *ConfigStore) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.URL.Query().Get("stream"), 10, 64)
		if err != nil {
			http.Error(w, "want ?stream=ID&type=cds (stream ids are on /debug/streams)", http.StatusBadRequest)
			return
		}
		want := r.URL.Query().Get("type")
		// What the tracker has judged by now is applied before the page is
		// read, so it agrees with /debug/streams; a store far behind gets
		// a second, then the page shows what it has.
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		c.q.flush(ctx)
		cancel()
		c.mu.Lock()
		st := c.streams[id]
		var page *ConfigPage
		var bodies []retained
		if st != nil {
			for url, t := range st.types {
				if url != want && codec.ShortType(url) != want {
					continue
				}
				page = &ConfigPage{Stream: id, TypeURL: url, Version: t.version, Incomplete: c.full}
				names := make([]string, 0, len(t.accepted))
				for n := range t.accepted {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					bodies = append(bodies, t.accepted[n])
				}
			}
		}
		c.mu.Unlock()
		if page == nil {
			http.Error(w, fmt.Sprintf("no retained %q resources for stream %d (is --retain-resources on, and has the type been accepted?)", want, id), http.StatusNotFound)
			return
		}
		for _, b := range bodies {
			page.Resources = append(page.Resources, showResource(b))
		}
		writeJSON(w, page)
	})
}

// RetentionOff is what GET /debug/config says without --retain-resources.
const RetentionOff = "resources are not retained: start adstap with --retain-resources (it keeps what each proxy accepted, up to --retain-max-bytes)"

// ConfigOff serves GET /debug/config when resources are not retained.
func ConfigOff() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, RetentionOff, http.StatusNotFound)
	})
}

// showResource decodes a resource for people, through the shared redaction;
// a type adstap does not know is shown by size alone, since its bytes could
// hold anything.
func showResource(r retained) json.RawMessage {
	body, _, err := redact.Resource(r.typeURL, r.body)
	var m proto.Message
	if err == nil {
		// Istio's ambient types too (redact.Types).
		m, err = anypb.UnmarshalNew(&anypb.Any{TypeUrl: r.typeURL, Value: body}, proto.UnmarshalOptions{Resolver: redact.Types})
	}
	if err != nil {
		b, _ := json.Marshal(map[string]any{"@type": r.typeURL, "undecoded_bytes": len(r.body)})
		return b
	}
	// An Any inside of a type this binary does not know would fail the
	// whole resource: it shows as its type URL and base64 bytes instead.
	redact.StandInUnknownAnys(m.ProtoReflect())
	a, err := anypb.New(m)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	b, err := protojson.MarshalOptions{Resolver: redact.Types}.Marshal(a)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

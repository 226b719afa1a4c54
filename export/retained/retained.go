// Package retained is the retained configuration: what each proxy accepted, kept within a byte budget and served redacted at /debug/config.
package retained

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3" // so every core type can be shown
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/outq"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
)

// DefaultMaxBytes bounds the resources a Store keeps unless told
// otherwise (--retain-max-bytes): a few full configurations of a large mesh.
const DefaultMaxBytes = 128 << 20

// Store keeps, per stream and type, the resources the client has
// accepted, for GET /debug/config. The tap otherwise keeps only hashes, so
// this is opt-in (--retain-resources) and bounded by a byte budget; past it
// new pushes are not retained and the page says so.
//
// It is a track.Sink fed by the tracker alone: the tracker keeps each push
// until its answer (within --nack-keep-bytes) and hands an acknowledged one
// over with its ACK (track.Accepted, leased to the store as a taker of
// every type, Take), its resources as the tap decoded them, by reference.
// The store never sees a push awaiting its answer and never decodes one.
// It copies the bodies it keeps on a goroutine of its own, behind a
// bounded queue: an accepted push that does not fit is let go of, counted
// (adstap_output_dropped_total{output="config"}), and the page says it is
// incomplete.
type Store struct {
	maxBytes int64
	q        *outq.Queue[configOp]
	taker    *track.Taker

	// Written under mu on the queue's goroutine, which alone reads them
	// without it, but for full, which OnEvent sets when an accepted push
	// is lost; the page reads them under mu.
	mu      sync.Mutex
	used    int64
	full    bool
	streams map[uint64]*retainedStream
}

type retainedStream struct {
	types map[string]*retainedType
}

type retainedType struct {
	version  string
	accepted map[string]Resource
	bytes    int64 // of the bodies in accepted
}

// Resource is a resource as retained: its type and its body, as accepted.
// Its bytes are the store's, never changed in place.
type Resource struct {
	TypeURL string
	Body    []byte
}

var (
	_ track.Sink    = (*Store)(nil)
	_ export.Output = (*Store)(nil)
)

// configOp is one call to the store, done on its queue's goroutine.
type configOp struct {
	kind     uint8 // opOpen, opClose, opAccepted, opEnded
	stream   uint64
	typeURL  string
	accepted *track.Lease
}

const (
	opOpen = iota
	opClose
	opAccepted
	opEnded // a push of the type ended with nothing to retain
)

// Config shapes the retained configuration.
type Config struct {
	// OutputConfig.QueueBytes bounds the accepted pushes waiting to be
	// retained.
	export.OutputConfig
	// MaxBytes bounds the resource bodies retained (--retain-max-bytes).
	MaxBytes int64
}

// New retains at most cfg.MaxBytes of resource bodies. Close
// stops it.
func New(cfg Config) *Store {
	c := &Store{maxBytes: cfg.MaxBytes, streams: map[uint64]*retainedStream{}}
	c.q = outq.New(export.ConfigOutput, cfg.QueueBytes, c.do, outq.WarnLost(shared.Logger(cfg.Logger), export.ConfigOutput, "pushes"), func(op configOp) {
		op.accepted.Release()
	})
	return c
}

func (c *Store) do(op configOp) {
	switch op.kind {
	case opOpen:
		c.mu.Lock()
		c.streams[op.stream] = &retainedStream{types: map[string]*retainedType{}}
		c.mu.Unlock()
	case opClose:
		c.closeStream(op.stream)
	case opAccepted:
		c.accept(op.stream, op.typeURL, op.accepted.Accepted())
		op.accepted.Release()
	case opEnded:
		if st := c.streams[op.stream]; st != nil && st.types[op.typeURL] == nil {
			c.mu.Lock()
			st.types[op.typeURL] = &retainedType{accepted: map[string]Resource{}}
			c.mu.Unlock()
		}
	}
}

// OnEvent follows the streams, and takes each accepted push the tracker
// hands over. It never waits: an accepted push that does not fit in the
// queue is let go of, and the page says it is incomplete.
func (c *Store) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.StreamOpened:
		if e.Stream.Protocol != codec.Opaque {
			c.q.Put(configOp{kind: opOpen, stream: e.Stream.ID}, 64, true)
		}
	case track.StreamClosed:
		c.q.Put(configOp{kind: opClose, stream: e.Stream.ID}, 64, true)
	case track.PushEnded:
		// Retained once acknowledged only: the store takes no push
		// superseded before its answer, which the tracker assumes applied.
		c.ended(e.Push, c.taker.Lease(e.Accepted))
	case track.LateAnswer:
		c.ended(e.Push, c.taker.Lease(e.Accepted))
	}
}

// Take registers the store with tr as a taker of every accepted push of
// every type; call it before tr tracks a stream. Without it the store sees
// the streams and their types but retains no resource.
func (c *Store) Take(tr *track.Tracker) { c.taker = tr.TakeAccepted(track.Takes{}) }

// ended takes what a push that ended accepted, if anything. A type whose
// pushes ended with nothing accepted (NACKed, say) is on the page all the
// same, with no resources.
func (c *Store) ended(p *track.Push, l *track.Lease) {
	if a := l.Accepted(); a != nil {
		if a.NotKept == "" && c.q.Put(configOp{kind: opAccepted, stream: p.StreamID, typeURL: p.TypeURL, accepted: l}, int(a.Bytes), false) {
			return
		}
		l.Release()
		shared.Taking("config.mu")
		c.mu.Lock()
		c.full = true
		c.mu.Unlock()
	}
	c.q.Put(configOp{kind: opEnded, stream: p.StreamID, typeURL: p.TypeURL}, 64, true)
}

// Name is the output's name, its queue's.
func (c *Store) Name() string { return export.ConfigOutput }

// Dropped counts the accepted pushes the store's queue dropped.
func (c *Store) Dropped() uint64 { return c.q.Dropped() }

// Close stops retaining, once what waits is retained or ctx is done.
func (c *Store) Close(ctx context.Context) error { return c.q.Close(ctx) }

func (c *Store) closeStream(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		for _, t := range st.types {
			c.used -= t.bytes
		}
		delete(c.streams, id)
	}
}

// accept applies an accepted push of type url to what stream id retains,
// copying the bodies it adds or changes; a resource it carried unchanged
// keeps the body retained before. Only this goroutine writes the streams,
// so it reads them without the lock, and takes it to change them.
func (c *Store) accept(id uint64, url string, a *track.Accepted) {
	st := c.streams[id]
	if st == nil {
		return
	}
	t := st.types[url]
	var old map[string]Resource
	var oldBytes int64
	if t != nil {
		old, oldBytes = t.accepted, t.bytes
	}
	// next is what the push makes of the type (Replace) or what it adds
	// and changes; the bodies of fresh are views into the push until
	// copied, once the result is known to fit.
	next := make(map[string]Resource, len(a.Resources))
	var fresh []string
	for _, v := range a.Resources {
		if r, ok := old[v.Name]; ok && v.Unchanged {
			if a.Replace {
				next[v.Name] = r
			}
			continue
		}
		if v.Body == nil && v.Unchanged {
			continue // carried unchanged from a state this store missed
		}
		if _, dup := next[v.Name]; !dup {
			fresh = append(fresh, v.Name)
		}
		next[v.Name] = Resource{TypeURL: v.TypeURL, Body: v.Body}
	}
	newBytes := oldBytes
	if a.Replace {
		newBytes = 0
		for _, r := range next {
			newBytes += int64(len(r.Body))
		}
	} else {
		for n, r := range next {
			newBytes += int64(len(r.Body) - len(old[n].Body))
		}
		for _, n := range a.Removed {
			if _, changed := next[n]; !changed {
				newBytes -= int64(len(old[n].Body))
			}
		}
	}
	c.mu.Lock()
	over := c.used-oldBytes+newBytes > c.maxBytes
	if over {
		c.full = true
	}
	c.mu.Unlock()
	if over {
		return
	}
	for _, n := range fresh {
		r := next[n]
		r.Body = bytes.Clone(r.Body)
		next[n] = r
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == nil {
		t = &retainedType{accepted: map[string]Resource{}}
		st.types[url] = t
	}
	if a.Replace {
		t.accepted = next
	} else {
		maps.Copy(t.accepted, next)
		for _, n := range a.Removed {
			if _, changed := next[n]; !changed {
				delete(t.accepted, n)
			}
		}
	}
	t.version, t.bytes = a.Version, newBytes
	c.used += newBytes - oldBytes
}

// Page is the body of GET /debug/config.
type Page struct {
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
func (c *Store) Handler() http.Handler {
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
		c.q.Flush(ctx)
		cancel()
		c.mu.Lock()
		st := c.streams[id]
		var page *Page
		var bodies []Resource
		if st != nil {
			for url, t := range st.types {
				if url != want && codec.ShortType(url) != want {
					continue
				}
				page = &Page{Stream: id, TypeURL: url, Version: t.version, Incomplete: c.full}
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
		shared.WriteJSON(w, page)
	})
}

// retentionOff is what GET /debug/config says without --retain-resources.
const retentionOff = "resources are not retained: start adstap with --retain-resources (it keeps what each proxy accepted, up to --retain-max-bytes)"

// Off serves GET /debug/config when resources are not retained.
func Off() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, retentionOff, http.StatusNotFound)
	})
}

// showResource decodes a resource for people, through the shared redaction;
// a type adstap does not know is shown by size alone, since its bytes could
// hold anything.
func showResource(r Resource) json.RawMessage {
	body, _, err := redact.Resource(r.TypeURL, r.Body)
	var m proto.Message
	if err == nil {
		// Istio's ambient types too (redact.Types).
		m, err = anypb.UnmarshalNew(&anypb.Any{TypeUrl: r.TypeURL, Value: body}, proto.UnmarshalOptions{Resolver: redact.Types})
	}
	if err != nil {
		b, _ := json.Marshal(map[string]any{"@type": r.TypeURL, "undecoded_bytes": len(r.Body)})
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

// Snapshot returns the retained resources of the streams ids, by stream,
// type and name, once what the tracker has judged so far is applied (as
// the page does, within a second). The bodies are the store's own, which
// it never changes in place.
func (c *Store) Snapshot(ctx context.Context, ids []uint64) map[uint64]map[string]map[string]Resource {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	c.q.Flush(ctx)
	cancel()
	out := map[uint64]map[string]map[string]Resource{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		st := c.streams[id]
		if st == nil {
			continue
		}
		types := map[string]map[string]Resource{}
		for url, t := range st.types {
			m := make(map[string]Resource, len(t.accepted))
			for n, r := range t.accepted {
				m[n] = r
			}
			types[url] = m
		}
		out[id] = types
	}
	return out
}

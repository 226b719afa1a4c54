package inspect

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
)

// Point says as of when the configuration a node had been sent is wanted:
// after the last push of a version, of a push round, or at a time. The zero
// Point is the end of the files.
type Point struct {
	Version string    // a version_info (system_version_info in Delta)
	PushID  string    // a push round's identity (track.Push.PushID)
	Time    time.Time // everything pushed at or before it
}

func (p Point) String() string {
	switch {
	case p.Version != "":
		return "version " + p.Version
	case p.PushID != "":
		return "push " + p.PushID
	case !p.Time.IsZero():
		return p.Time.Format(time.RFC3339Nano)
	}
	return "the end of the capture"
}

// Sent is the configuration a captured node had been sent as of a point:
// per type, the resources it held, as captured.
type Sent struct {
	Node string
	// RawNode is the node of the client's first request on its latest
	// stream, as it was on the wire (an envoy.config.core.v3.Node).
	RawNode []byte
	// Delta is the protocol of the stream the latest push went on.
	Delta bool
	Types []*SentType // by type URL
	// Asked lists every type the node asked for in the files, pushed to
	// it or not.
	Asked []string
	At    Point
	Files []fileRead
}

// SentType is what a node held of one type: the pushes of its latest stream
// of that type, applied in order (in SotW, a listener or cluster push
// replaces the lot; otherwise, and in Delta, resources are added, replaced
// and removed by name).
type SentType struct {
	TypeURL string
	Delta   bool // captured on a Delta stream
	// Version and Nonce are those of the latest push applied.
	Version, Nonce string
	Resources      []SentResource
	// Result and Error are how the client answered the latest push in the
	// capture: ack, nack (with its message), ..., or "" when the files end
	// first.
	Result track.PushResult
	Error  string
}

// SentResource is one resource as captured.
type SentResource struct {
	Name string
	// Any is the resource as a SotW response carries it (a
	// google.protobuf.Any), as captured.
	Any []byte
	// Wrapped is the resource as a Delta response carries it (an
	// envoy.service.discovery.v3.Resource) when it was captured so; nil
	// when it came in a SotW response.
	Wrapped []byte
	// Redacted is set when the capture replaced secrets in it: it is not
	// what the client was sent.
	Redacted bool
}

// Type returns what the node held of typeURL, nil if nothing.
func (s *Sent) Type(typeURL string) *SentType {
	for _, t := range s.Types {
		if t.TypeURL == typeURL {
			return t
		}
	}
	return nil
}

// ReadSent reads the files and returns what node had been sent as of at.
// With node empty the files must hold pushes to one node only. A node, a
// version or a push round the files do not hold is an InputError listing
// those they do; warnings (a file cut short) go to stderr.
func ReadSent(ctx context.Context, files []string, node string, at Point, stderr io.Writer) (*Sent, error) {
	c := &sentCollector{node: node, byNonce: map[nonceKey]*sentPush{}, rawNode: map[string][]byte{}, pushed: map[string]bool{}, asked: map[string][]string{}, named: map[uint64]bool{}}
	read, err := readAll(ctx, files, track.Config{}, c, stderr, "replay")
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.sent(at, read)
}

// sentPush is one push of the files.
type sentPush struct {
	node                   string
	stream                 uint64
	delta                  bool
	replace                bool // the push is the whole of its type (track.Push.Replace)
	typeURL                string
	version, pushID, nonce string
	at                     time.Time
	// msg is the response, kept for the node asked for only.
	msg      []byte
	redacted bool
	names    []string // the codec's name of each resource, by position
	removed  []string
	result   track.PushResult
	err      string
}

type nonceKey struct {
	stream         uint64
	typeURL, nonce string
}

// sentCollector keeps every push of the files, and the bytes of those of
// the node asked for.
type sentCollector struct {
	node    string
	pushes  []*sentPush
	byNonce map[nonceKey]*sentPush
	nodes   []string // nodes pushed to, in order
	pushed  map[string]bool
	rawNode map[string][]byte // the node of each node id's latest stream
	named   map[uint64]bool   // the streams whose node is in rawNode
	asked   map[string][]string
}

func (c *sentCollector) note(note) {}

func (c *sentCollector) events(st *step, evs []track.Event) {
	for _, e := range evs {
		switch e := e.(type) {
		case track.RequestSeen:
			if e.Node.ID != "" && !slices.Contains(c.asked[e.Node.ID], e.TypeURL) {
				c.asked[e.Node.ID] = append(c.asked[e.Node.ID], e.TypeURL)
			}
			// A stream's first node is the whole of it; clients may repeat
			// only its id later (istio's Delta client does).
			if st.Req != nil && st.Req.Node != nil && st.Rec != nil && e.Node.ID != "" && !c.named[e.StreamID] {
				if raw := codec.RawNode(st.Rec.Message, st.Delta); raw != nil {
					c.rawNode[e.Node.ID] = bytes.Clone(raw)
					c.named[e.StreamID] = true
				}
			}
		case track.PushSent:
			c.sentPush(st, e.Push)
		case track.PushEnded:
			if p := c.byNonce[nonceKey{e.Push.StreamID, e.Push.TypeURL, e.Push.Nonce}]; p != nil {
				p.result, p.err = e.Result, e.Error
			}
		case track.LateAnswer:
			if p := c.byNonce[nonceKey{e.Push.StreamID, e.Push.TypeURL, e.Push.Nonce}]; p != nil {
				p.result = e.Result
			}
		}
	}
}

func (c *sentCollector) sentPush(st *step, push *track.Push) {
	p := &sentPush{
		node: push.Node.ID, stream: push.StreamID, delta: st.Delta, replace: push.Replace, typeURL: push.TypeURL,
		version: push.Version, pushID: push.PushID(), nonce: push.Nonce, at: push.SentAt,
	}
	if !c.pushed[p.node] {
		c.pushed[p.node] = true
		c.nodes = append(c.nodes, p.node)
	}
	if (c.node == "" || c.node == p.node) && st.Resp != nil && st.Rec != nil {
		// The reader may reuse a record's buffer: keep a copy.
		p.msg = bytes.Clone(st.Rec.Message)
		p.redacted = st.Rec.Redacted
		p.names = make([]string, len(st.Resp.Resources))
		for i, r := range st.Resp.Resources {
			p.names[i] = string(r.Name)
		}
		p.removed = slices.Clone(st.Resp.RemovedResources)
	}
	c.pushes = append(c.pushes, p)
	c.byNonce[nonceKey{p.stream, p.typeURL, p.nonce}] = p
}

// sent applies the chosen node's pushes up to the point.
func (c *sentCollector) sent(at Point, files []fileRead) (*Sent, error) {
	node := c.node
	switch {
	case len(c.nodes) == 0:
		return nil, inputErrorf("no push to any node in %s: nothing to replay", fileList(files))
	case node == "" && len(c.nodes) > 1:
		// Sorted: the order the captures met the nodes in is the order
		// their streams happened to push first.
		return nil, inputErrorf("%s pushed to %d nodes; choose one with --node: %s", fileList(files), len(c.nodes), listSome(slices.Sorted(slices.Values(c.nodes))))
	case node == "":
		node = c.nodes[0]
	case !c.pushed[node]:
		return nil, inputErrorf("no push to node %q in %s; the nodes pushed to: %s", node, fileList(files), listSome(slices.Sorted(slices.Values(c.nodes))))
	}
	var mine []*sentPush
	for _, p := range c.pushes {
		if p.node == node {
			mine = append(mine, p)
		}
	}
	cut, err := cutOff(mine, at, node)
	if err != nil {
		return nil, err
	}
	// Per type, the stream of its latest push up to the cut.
	latest := map[string]*sentPush{}
	for _, p := range mine {
		if !p.at.After(cut) && (latest[p.typeURL] == nil || !p.at.Before(latest[p.typeURL].at)) {
			latest[p.typeURL] = p
		}
	}
	s := &Sent{Node: node, RawNode: c.rawNode[node], Asked: c.asked[node], At: at, Files: files}
	var last *sentPush
	for _, typeURL := range sortedKeys(latest) {
		l := latest[typeURL]
		if last == nil || l.at.After(last.at) {
			last = l
		}
		t := &SentType{TypeURL: typeURL, Delta: l.delta}
		held := resourceSet{}
		for _, p := range mine {
			if p.stream != l.stream || p.typeURL != typeURL || p.at.After(cut) {
				continue
			}
			if err := held.apply(p); err != nil {
				return nil, inputErrorf("%s: the %s push of version %q to %s: %v", fileList(files), typeLabel(typeURL), p.version, node, err)
			}
			t.Version, t.Nonce, t.Result, t.Error = p.version, p.nonce, p.result, p.err
			if p == l {
				break
			}
		}
		t.Resources = held.list
		s.Types = append(s.Types, t)
	}
	s.Delta = last.delta
	return s, nil
}

// cutOff is the time of the last push the point includes.
func cutOff(pushes []*sentPush, at Point, node string) (time.Time, error) {
	var cut time.Time
	var seen []string
	match := func(want string, of func(*sentPush) string, what string) error {
		for _, p := range pushes {
			if of(p) == want {
				cut = p.at
			}
			if v := of(p); v != "" && !slices.Contains(seen, v) {
				seen = append(seen, v)
			}
		}
		if cut.IsZero() {
			return inputErrorf("no push of %s %q to node %s; the %ss pushed to it: %s", what, want, node, what, listSome(seen))
		}
		return nil
	}
	switch {
	case at.Version != "":
		return cut, match(at.Version, func(p *sentPush) string { return p.version }, "version")
	case at.PushID != "":
		return cut, match(at.PushID, func(p *sentPush) string { return p.pushID }, "push")
	case !at.Time.IsZero():
		if first := pushes[0].at; first.After(at.Time) {
			return cut, inputErrorf("no push to node %s at or before %s: its first push was at %s", node, at.Time.Format(time.RFC3339Nano), first.Format(time.RFC3339Nano))
		}
		return at.Time, nil
	}
	for _, p := range pushes {
		if p.at.After(cut) {
			cut = p.at
		}
	}
	return cut, nil
}

// resourceSet is the resources of one type, in the order they came.
type resourceSet struct {
	list  []SentResource
	index map[string]int
}

func (s *resourceSet) apply(p *sentPush) error {
	entries, err := codec.RawResources(p.msg, p.delta)
	if err != nil {
		return err
	}
	if len(entries) != len(p.names) {
		return fmt.Errorf("%d resources, %d names", len(entries), len(p.names))
	}
	if p.replace {
		// The push is the whole state of its type, as the tracker judged.
		*s = resourceSet{}
	}
	if s.index == nil {
		s.index = map[string]int{}
	}
	for i, entry := range entries {
		r := SentResource{Name: p.names[i], Redacted: p.redacted && bytes.Contains(entry, []byte(redact.Marker))}
		switch {
		case p.delta:
			r.Wrapped, r.Any = entry, codec.WrappedAny(entry)
		case codec.AnyTypeURL(entry) == codec.TypeResource:
			// A SotW resource with a TTL comes wrapped in a Resource.
			r.Wrapped = codec.AnyValue(entry)
			r.Any = codec.WrappedAny(r.Wrapped)
		default:
			r.Any = entry
		}
		if r.Any == nil {
			continue // a TTL heartbeat: the client keeps what it has
		}
		if j, ok := s.index[r.Name]; ok {
			s.list[j] = r
			continue
		}
		s.index[r.Name] = len(s.list)
		s.list = append(s.list, r)
	}
	for _, name := range p.removed {
		j, ok := s.index[name]
		if !ok {
			continue
		}
		s.list = slices.Delete(s.list, j, j+1)
		delete(s.index, name)
		for k := j; k < len(s.list); k++ {
			s.index[s.list[k].Name] = k
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package origin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	// The resource types istiod stamps, and the filter that can carry an
	// inline route configuration, so their Anys can be opened.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
)

// Resource is one resource a NACK rejected and the Istio objects it records
// as its source, in the order they appear in it (none: the control plane
// recorded nothing, as go-control-plane never does).
type Resource struct {
	Name    string
	Objects []Object
	// Unchanged is set for a resource the message names that the push
	// carried unchanged since the version the client last accepted: the
	// client accepted these very bytes before, so it is not what was
	// rejected (the message names it for another reason: its name is part
	// of the rejected one's, or the rejected one refers to it). Its objects
	// are not read.
	Unchanged bool
}

// unchangedNote is what the outputs say of a Resource that is Unchanged.
const unchangedNote = "unchanged since the last accepted version: not what was rejected"

// Rejection is what a NACK rejected, read: the resources of the push it
// answers that its message names (all of them when it names none, but for
// those the push carried unchanged) and the Istio objects each records.
type Rejection struct {
	named     bool
	resources []Resource
	// unchanged counts the pushed resources out of suspicion because the
	// push carried them unchanged, when the message names none.
	unchanged int
	err       error
	// summary is set on a Rejection read back from JSON, which has no
	// bytes to read.
	summary string
	// changed is what every resource the push added or changed records.
	changed Stamped
}

// ErrNotKept is the error of a Rejection whose push's bytes were not kept.
var ErrNotKept = errors.New("the rejected push was not kept")

// Of reads what r rejected, decoding the push the first time anyone asks
// (whichever output's goroutine that is) and sharing the result with every
// later caller: a NACK is rare, and a NACK loop rejects one push many times.
// A nil r gives a nil Rejection.
func Of(r *track.Rejected) *Rejection {
	switch {
	case r == nil:
		return nil
	case r.NotKept != "":
		return &Rejection{named: len(r.Names) > 0, err: fmt.Errorf("%w: %s", ErrNotKept, r.NotKept)}
	}
	switch x := r.Read(func(data mem.BufferSlice) any { return read(r, data) }).(type) {
	case *Rejection:
		return x
	case *claimed:
		return x.rejection()
	}
	return &Rejection{named: len(r.Names) > 0, err: fmt.Errorf("%w: adstap let go of it before any output asked", ErrNotKept)}
}

// Claim takes r's bytes, without reading them, for an Of on an output's
// goroutine later: the tracker may let go of r meanwhile (an ACK of the
// next push), and Of then reads what Claim took, once. It costs a
// reference to the bytes, no copy and no decode, so the goroutine that
// hands a NACK to an output's queue calls it, and never waits for the
// decode. A nil r, or one whose bytes were not kept or are read already,
// is left as it is.
func Claim(r *track.Rejected) {
	if r == nil || r.NotKept != "" {
		return
	}
	r.Read(func(data mem.BufferSlice) any {
		data.Ref() // Read lets go of r's own reference when this returns
		return &claimed{r: r, data: data}
	})
}

// claimed is what Claim took of a Rejected, read by the first Of.
type claimed struct {
	once sync.Once
	r    *track.Rejected
	data mem.BufferSlice
	x    *Rejection
}

func (c *claimed) rejection() *Rejection {
	c.once.Do(func() {
		c.x = read(c.r, c.data).(*Rejection)
		c.data.Free()
		c.data = nil
	})
	return c.x
}

// read decodes the rejected push: the whole push, or only the resources it
// changed (track.Rejected.OnlyChanged), which decode alike.
func read(r *track.Rejected, data mem.BufferSlice) any {
	names := r.Names
	x := &Rejection{named: len(names) > 0}
	if !x.named {
		x.unchanged = r.Unchanged
	}
	if data == nil {
		return x
	}
	var resp codec.Response
	if err := resp.DecodeBuffers(data, r.Delta); err != nil {
		x.err = err
		return x
	}
	for i, res := range resp.Resources {
		if x.changed.Truncated {
			break
		}
		if !res.Heartbeat && !r.UnchangedAt(i) {
			x.changed.scan(res.Body, nil)
		}
	}
	var found []bool // names found among the resources kept
	if r.OnlyChanged {
		found = make([]bool, len(names))
	}
	for i, res := range resp.Resources {
		if res.Heartbeat {
			continue
		}
		named := true
		if len(names) > 0 {
			// Compared as bytes: a push of 10,000 resources makes no
			// garbage for the 9,999 the NACK does not name.
			k := slices.IndexFunc(names, func(n string) bool { return n == string(res.Name) })
			if named = k >= 0; named && found != nil {
				found[k] = true
			}
		}
		switch {
		case !named:
			continue
		case r.UnchangedAt(i):
			if x.named {
				x.resources = append(x.resources, Resource{Name: codec.Text(res.Name), Unchanged: true})
			}
			continue
		}
		// Shown as valid UTF-8, as every name leaving the tap: the
		// summary goes into spans and metrics.
		name := codec.Text(res.Name)
		objs, err := objectsOf(string(res.TypeURL), res.Body, r.Message)
		if err != nil {
			x.err = fmt.Errorf("resource %q: %w", name, err)
			continue
		}
		x.resources = append(x.resources, Resource{Name: name, Objects: objs})
	}
	// The names the message mentions are pushed ones: those not kept
	// were carried unchanged.
	for k, ok := range found {
		if !ok && !slices.Contains(names[:k], names[k]) {
			x.resources = append(x.resources, Resource{Name: codec.Text([]byte(names[k])), Unchanged: true})
		}
	}
	return x
}

// Resources returns the rejected resources and their objects. The result is
// shared: do not modify it.
func (x *Rejection) Resources() ([]Resource, error) {
	if x == nil {
		return nil, nil
	}
	return x.resources, x.err
}

// Changed is what the resources the rejected push added or changed record
// of their Istio objects, whether the message names them or not: what the
// push came from, as Scanner.Changed reads it for a push that was not rejected.
func (x *Rejection) Changed() Stamped {
	if x == nil {
		return Stamped{}
	}
	return x.changed
}

// namedInMessage reports whether the NACK's message named the rejected resources,
// rather than the whole push being under suspicion.
func (x *Rejection) namedInMessage() bool { return x != nil && x.named }

// unchangedCount is how many pushed resources are out of suspicion, when the
// message names none, because the push carried them unchanged since the
// version the client last accepted: Resources are then only those it
// added or changed.
func (x *Rejection) unchangedCount() int {
	if x == nil {
		return 0
	}
	return x.unchanged
}

// suspects returns the resources under suspicion, and those the message
// names that are out of it (Resource.Unchanged).
func (x *Rejection) suspects() (suspects, cleared []Resource, err error) {
	res, err := x.Resources()
	for _, r := range res {
		if r.Unchanged {
			cleared = append(cleared, r)
		} else {
			suspects = append(suspects, r)
		}
	}
	return suspects, cleared, err
}

// objectsOf opens one resource and collects the objects recorded in every
// Metadata inside it, at any depth: istiod stamps clusters, filter chains
// and routes, each where it builds them. When the NACK's message names a
// part of the resource that records objects (a virtual host, a route, a
// filter chain, by its name), only that part's objects are returned: a
// route configuration gathers the routes of every VirtualService on its
// port, and the message may say which one failed.
func objectsOf(typeURL string, body []byte, message string) ([]Object, error) {
	if !bytes.Contains(body, stampMarker) {
		// No object recorded: no need to unmarshal it. A NACK that names no
		// resource puts a whole push under suspicion, and most resources
		// of a push carry no stamp.
		return nil, nil
	}
	m, err := (&anypb.Any{TypeUrl: typeURL, Value: body}).UnmarshalNew()
	if err != nil {
		return nil, err
	}
	all := collect(m.ProtoReflect(), nil)
	var named []Object
	redact.EditNested(m.ProtoReflect(), redact.NestedEdit{
		Field: func(_ protoreflect.FieldDescriptor, child protoreflect.Message) (bool, bool) {
			if mentioned(child, message) {
				named = collect(child, named)
			}
			return false, true
		},
	})
	if len(named) > 0 {
		return named, nil
	}
	return all, nil
}

// collect adds to objs the objects recorded in m and in what it holds.
func collect(m protoreflect.Message, objs []Object) []Object {
	add := func(md *core.Metadata) {
		p := md.GetFilterMetadata()[istioKey].GetFields()[configField].GetStringValue()
		if o, ok := ParsePath(p); ok && !slices.Contains(objs, o) {
			objs = append(objs, o)
		}
	}
	if md, ok := m.Interface().(*core.Metadata); ok {
		add(md)
		return objs
	}
	redact.EditNested(m, redact.NestedEdit{
		Field: func(_ protoreflect.FieldDescriptor, child protoreflect.Message) (bool, bool) {
			md, ok := child.Interface().(*core.Metadata)
			if !ok {
				return false, true
			}
			add(md)
			return false, false
		},
	})
	return objs
}

// minMentionedName keeps short names ("v1", "80") from matching any message.
const minMentionedName = 4

// mentioned reports whether message names m by its name field.
func mentioned(m protoreflect.Message, message string) bool {
	fd := m.Descriptor().Fields().ByName("name")
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return false
	}
	name := m.Get(fd).String()
	return len(name) >= minMentionedName && strings.Contains(message, name)
}

// Where istiod writes the object a resource was built from
// (pilot/pkg/networking/util: IstioMetadataKey, AddConfigInfoMetadata).
const (
	istioKey    = "istio"
	configField = "config"
)

// stampMarker is in the bytes of every resource that records an object (a
// string field is stored as is), so a resource without it is not opened.
var stampMarker = []byte("/apis/")

// Objects returns every object of the rejected resources, each once.
func (x *Rejection) Objects() []Object {
	res, _ := x.Resources()
	var out []Object
	for _, x := range res {
		for _, o := range x.Objects {
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	return out
}

// maxShown is how many objects a one-line summary names before "and N more".
const maxShown = 3

// Summary is the rejection in words for one line, e.g. "from
// DestinationRule shop/reviews", or why no object can be named. It says
// when a resource the message names was not what was rejected (unchanged
// since the last accepted version), and, when the message names none,
// that only what the push changed is suspected. It is empty for a nil
// Rejection.
func (x *Rejection) Summary() string {
	if x == nil {
		return ""
	}
	if x.summary != "" {
		return x.summary
	}
	res, cleared, err := x.suspects()
	if x.namedInMessage() && len(res) == 0 && len(cleared) > 0 && err == nil {
		return "Istio source unknown: the message names only " + namesOf(cleared) + ", " + unchangedNote
	}
	s := x.source(res, err)
	switch {
	case len(cleared) == 1:
		s += "; " + cleared[0].Name + ", also named, is " + unchangedNote
	case len(cleared) > 1:
		s += fmt.Sprintf("; %d other resources named are %s", len(cleared), unchangedNote)
	case x.unchanged == 1 && !x.namedInMessage():
		s += " (the one resource the push carried unchanged since the last accepted version is not suspected)"
	case x.unchanged > 1 && !x.namedInMessage():
		s += fmt.Sprintf(" (the %d resources the push carried unchanged since the last accepted version are not suspected)", x.unchanged)
	}
	return s
}

// source says where the suspected resources res came from.
func (x *Rejection) source(res []Resource, err error) string {
	// Only what the push changed is suspected: say so where the whole push
	// would be.
	pushed, those := "the push comes from ", "pushed resources"
	if x.unchanged > 0 {
		pushed, those = "what the push changed comes from ", "resources the push changed"
	}
	objs := x.Objects()
	if len(objs) > 0 {
		names := make([]string, 0, min(len(objs), maxShown))
		for _, o := range objs[:min(len(objs), maxShown)] {
			names = append(names, o.String())
		}
		s := strings.Join(names, ", ")
		if len(objs) > maxShown {
			s += fmt.Sprintf(" and %d more", len(objs)-maxShown)
		}
		switch {
		case !x.namedInMessage() && (len(res) > 1 || x.unchanged > 0):
			// Which resource is at fault is unknown: these are every
			// object the push (or what it changed) came from.
			return "the message names no resource; " + pushed + s
		case len(objs) > 1:
			// A route configuration gathers the routes of every
			// VirtualService on its port: one of them is at fault.
			return "from one of " + s
		}
		return "from " + s
	}
	switch {
	case err != nil && len(res) == 0:
		return "Istio source unknown: " + err.Error()
	case len(res) == 0 && !x.namedInMessage() && x.unchanged > 0:
		return "Istio source unknown: the message names no resource, and the push changed none"
	case len(res) == 0:
		return "Istio source unknown: the push holds no resource the message names"
	case len(res) == 1:
		return "no Istio config recorded in " + res[0].Name
	case x.namedInMessage():
		return fmt.Sprintf("no Istio config recorded in the %d resources the message names", len(res))
	default:
		return fmt.Sprintf("no Istio config recorded in any of the %d %s", len(res), those)
	}
}

// namesOf names resources for a sentence: the name of one, the count of
// several.
func namesOf(res []Resource) string {
	if len(res) == 1 {
		return res[0].Name
	}
	return fmt.Sprintf("%d resources", len(res))
}

// MarshalJSON writes the rejected resources and their objects, decoding the
// push if no one has yet:
//
//	{"resources":[{"name":"outbound|9080||reviews.shop.svc.cluster.local",
//	  "istio_config":[{"kind":"DestinationRule","namespace":"shop","name":"reviews",
//	  "path":"/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews",
//	  "kubectl":"kubectl get destinationrule -n shop reviews"}]}]}
func (x *Rejection) MarshalJSON() ([]byte, error) {
	out := rejectionJSON{Resources: []resourceJSON{}, Summary: x.Summary(), Unchanged: x.unchangedCount()}
	res, err := x.Resources()
	for _, x := range res {
		j := resourceJSON{Name: x.Name, IstioConfig: []objectJSON{}}
		if x.Unchanged {
			j.Unchanged, j.Note = true, unchangedNote
		}
		for _, o := range x.Objects {
			j.IstioConfig = append(j.IstioConfig, objectJSON{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Path: o.Path, Kubectl: o.Kubectl()})
		}
		out.Resources = append(out.Resources, j)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads back what MarshalJSON wrote (a client of
// /debug/streams, such as adstap status): Resources, Objects and Summary
// then say what the tap said.
func (x *Rejection) UnmarshalJSON(b []byte) error {
	var in rejectionJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*x = Rejection{summary: in.Summary, unchanged: in.Unchanged}
	for _, j := range in.Resources {
		res := Resource{Name: j.Name, Unchanged: j.Unchanged}
		for _, o := range j.IstioConfig {
			obj, ok := ParsePath(o.Path)
			if !ok {
				obj = Object{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Path: o.Path}
			}
			res.Objects = append(res.Objects, obj)
		}
		x.resources = append(x.resources, res)
	}
	if in.Error != "" {
		x.err = errors.New(in.Error)
	}
	return nil
}

// The JSON form of a Rejection.
type (
	rejectionJSON struct {
		Resources []resourceJSON `json:"resources"`
		Summary   string         `json:"summary"`
		// Unchanged counts the pushed resources out of suspicion, when
		// the message names none, because the push carried them unchanged.
		Unchanged int    `json:"unchanged_not_suspected,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	resourceJSON struct {
		Name        string       `json:"name"`
		IstioConfig []objectJSON `json:"istio_config"`
		// Unchanged and Note: a resource the message names that the push
		// carried unchanged since the last accepted version.
		Unchanged bool   `json:"unchanged,omitempty"`
		Note      string `json:"note,omitempty"`
	}
	objectJSON struct {
		Kind      string `json:"kind"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Path      string `json:"path"`
		Kubectl   string `json:"kubectl"`
	}
)

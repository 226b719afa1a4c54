package redact

import (
	"sync"
	"sync/atomic"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A plan says where, in the wire form of one message type, a secret can
// be: the fields that hold one (a DataSource in a secretFields field), and
// those whose message may hold one further down, at any depth, through
// any Any. Every other field is skipped by its length, unread. Plans are
// derived from the message descriptors linked into the binary (and Istio's
// ambient ones, Types), the same the typed messages are generated from, so
// they name every field a typed walk would open, by number.
type plan struct {
	name protoreflect.FullName
	// any: the message is a google.protobuf.Any, walked as the type its
	// type_url names.
	any bool
	// dense holds the fields by number when the largest is small; sparse
	// otherwise.
	dense  []*fieldPlan
	sparse map[protowire.Number]*fieldPlan
}

// fieldPlan is what to do with a field of a plan's message.
type fieldPlan struct {
	// secret: the field is a DataSource holding key material, replaced by
	// its fingerprint when inline.
	secret bool
	// msg is the plan of the field's message (a map field's: its entry's),
	// when it is not a secret.
	msg *plan
}

func (p *plan) field(num protowire.Number) *fieldPlan {
	if p.sparse != nil {
		return p.sparse[num]
	}
	if int(num) < len(p.dense) {
		return p.dense[num]
	}
	return nil
}

// maxDense is the largest field number a plan indexes in a slice.
const maxDense = 512

// secretFields are the DataSource fields that hold key material: TLS private
// keys and their passwords, generic secrets (HMAC keys, OAuth secrets), and
// session ticket keys.
var secretFields = map[protoreflect.Name]bool{
	"private_key": true, "password": true, "secret": true, "keys": true,
}

var dataSourceName = (&core.DataSource{}).ProtoReflect().Descriptor().FullName()

// isSecret reports whether fd holds key material.
func isSecret(fd protoreflect.FieldDescriptor) bool {
	return fd.Message() != nil && !fd.IsMap() && secretFields[fd.Name()] && fd.Message().FullName() == dataSourceName
}

// plans holds every plan built, by message name; nil for a type that can
// never hold a secret.
var plans = struct {
	sync.Mutex
	byName map[protoreflect.FullName]*plan
}{byName: map[protoreflect.FullName]*plan{}}

// planOf returns md's plan, building it and the plans of every message it
// can hold on first use; nil when md can never hold a secret.
func planOf(md protoreflect.MessageDescriptor) *plan {
	plans.Lock()
	defer plans.Unlock()
	if p, ok := plans.byName[md.FullName()]; ok {
		return p
	}
	// The message types reachable from md through message fields, not
	// planned yet (an Any is a leaf: what it holds is known only from its
	// type_url, when it is read).
	var todo []protoreflect.MessageDescriptor
	seen := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	var visit func(protoreflect.MessageDescriptor)
	visit = func(d protoreflect.MessageDescriptor) {
		if _, ok := plans.byName[d.FullName()]; ok {
			return
		}
		if _, ok := seen[d.FullName()]; ok {
			return
		}
		seen[d.FullName()] = d
		todo = append(todo, d)
		if d.FullName() == anyName {
			return
		}
		fields := d.Fields()
		for i := range fields.Len() {
			if m := fields.Get(i).Message(); m != nil && fields.Get(i).Kind() == protoreflect.MessageKind {
				visit(m)
			}
		}
	}
	visit(md)
	// may[d]: d can hold a secret. An Any can; so can a message with a
	// secret field, or with a field of a message that can. Grown to a
	// fixed point, for types that hold themselves.
	may := map[protoreflect.FullName]bool{}
	holds := func(d protoreflect.MessageDescriptor) bool {
		if p, ok := plans.byName[d.FullName()]; ok {
			return p != nil
		}
		return may[d.FullName()]
	}
	for changed := true; changed; {
		changed = false
		for _, d := range todo {
			if may[d.FullName()] {
				continue
			}
			if d.FullName() == anyName {
				may[d.FullName()], changed = true, true
				continue
			}
			fields := d.Fields()
			for i := range fields.Len() {
				fd := fields.Get(i)
				if fd.Kind() != protoreflect.MessageKind {
					continue
				}
				if isSecret(fd) || holds(fd.Message()) {
					may[d.FullName()], changed = true, true
					break
				}
			}
		}
	}
	// The plans, made first and filled after, so that a type that holds
	// itself points to its own plan.
	for _, d := range todo {
		var p *plan
		if may[d.FullName()] {
			p = &plan{name: d.FullName(), any: d.FullName() == anyName}
		}
		plans.byName[d.FullName()] = p
	}
	for _, d := range todo {
		p := plans.byName[d.FullName()]
		if p == nil || p.any {
			continue
		}
		fields := d.Fields()
		top := protowire.Number(0)
		planned := map[protowire.Number]*fieldPlan{}
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.Kind() != protoreflect.MessageKind {
				continue
			}
			var fp *fieldPlan
			switch {
			case isSecret(fd):
				fp = &fieldPlan{secret: true}
			case plans.byName[fd.Message().FullName()] != nil:
				fp = &fieldPlan{msg: plans.byName[fd.Message().FullName()]}
			default:
				continue
			}
			planned[fd.Number()] = fp
			top = max(top, fd.Number())
		}
		if top > maxDense {
			p.sparse = planned
			continue
		}
		p.dense = make([]*fieldPlan, top+1)
		for num, fp := range planned {
			p.dense[num] = fp
		}
	}
	return plans.byName[md.FullName()]
}

// byURL caches the plans of the types Any values name, by type URL, so
// that finding one reads a map without a lock or an allocation. It is
// replaced whole when a URL is added, which happens once per type.
var byURL atomic.Pointer[map[string]*plan]

// maxURLs bounds the type URLs remembered: a stream of made-up ones is
// looked up each time rather than grow the cache without end.
const maxURLs = 4096

var byURLMu sync.Mutex

// planOfURL returns the plan of the type an Any's type_url names; nil
// when the type is unknown to the binary or can never hold a secret (an
// Any of an unknown type is left as it is, as a typed walk leaves it).
func planOfURL(url []byte) *plan {
	if m := byURL.Load(); m != nil {
		if p, ok := (*m)[string(url)]; ok {
			return p
		}
	}
	var p *plan
	if mt, err := Types.FindMessageByURL(string(url)); err == nil {
		p = planOf(mt.Descriptor())
	}
	byURLMu.Lock()
	defer byURLMu.Unlock()
	old := byURL.Load()
	if old != nil && len(*old) >= maxURLs {
		return p
	}
	m := make(map[string]*plan, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[string(url)] = p
	byURL.Store(&m)
	return p
}

func lenOf(m *map[string]*plan) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

package redact

import (
	"encoding/base64"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// NestedEdit says what EditNested does on its way through a message.
type NestedEdit struct {
	// Field, when set, is called for every message found in a field (alone,
	// in a list or as a map value) before what is inside it is walked; it
	// may change the message, and descend false skips its contents.
	Field func(fd protoreflect.FieldDescriptor, child protoreflect.Message) (changed, descend bool)
	// UnknownAny, when set, is called for an Any whose type this binary does
	// not know, and may replace it.
	UnknownAny func(a *anypb.Any) bool
}

// EditNested walks every message inside m at any depth, opening each Any it
// knows the type of and packing it again, deterministically, when something
// inside changed. It reports whether anything did. Redaction and the
// readable forms of resources (inspect, /debug/config) walk resources this
// one way.
func EditNested(m protoreflect.Message, e NestedEdit) bool {
	if m.Descriptor().FullName() == anyName {
		return e.editAny(m)
	}
	changed := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		visit := func(child protoreflect.Message) {
			descend := true
			if e.Field != nil {
				var c bool
				c, descend = e.Field(fd, child)
				changed = c || changed
			}
			if descend {
				changed = EditNested(child, e) || changed
			}
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visit(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(mv.Message())
					return true
				})
			}
		default:
			visit(v.Message())
		}
		return true
	})
	return changed
}

var anyName = (&anypb.Any{}).ProtoReflect().Descriptor().FullName()

func (e NestedEdit) editAny(m protoreflect.Message) bool {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return false
	}
	inner, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{Resolver: Types})
	if err != nil {
		return e.UnknownAny != nil && e.UnknownAny(a)
	}
	if !EditNested(inner.ProtoReflect(), e) {
		return false
	}
	value, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil {
		return false
	}
	a.Value = value
	return true
}

// UnknownTypeKey marks, in the Struct StandInUnknownAnys puts in place of an
// Any of a type this binary does not know, that Any's type URL.
const UnknownTypeKey = "adstap.unknown_type_url"

// StandInUnknownAnys replaces, at any depth, every Any of a type this binary
// does not know (protojson fails the whole message on one) with a Struct
// holding its type URL (UnknownTypeKey) and its bytes (value_base64), so
// the rest of the message can still be shown.
func StandInUnknownAnys(m protoreflect.Message) bool {
	return EditNested(m, NestedEdit{UnknownAny: standInAny})
}

func standInAny(a *anypb.Any) bool {
	st, err := structpb.NewStruct(map[string]any{UnknownTypeKey: a.GetTypeUrl(), "value_base64": base64.StdEncoding.EncodeToString(a.GetValue())})
	if err != nil {
		return false
	}
	packed, err := anypb.New(st)
	if err != nil {
		return false
	}
	a.TypeUrl, a.Value = packed.TypeUrl, packed.Value
	return true
}

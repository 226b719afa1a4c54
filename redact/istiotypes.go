package redact

import (
	_ "embed"
	"errors"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// istioAmbient holds the descriptors of ztunnel's xDS types,
// istio.workload.Address and istio.security.Authorization, as the pinned
// Istio's generated code (istio.io/istio/pkg/workloadapi) publishes them:
// only istio.io/istio does, and the tap does not depend on it. The Istio
// compatibility module checks that they are Istio's, byte for byte
// (istio/ambient_test.go), and rewrites them with -update.
//
//go:embed istio_ambient.binpb
var istioAmbient []byte

// Types resolves the message types a decoded resource may hold: every type
// linked into the binary (go-control-plane's Envoy types, Istio's NDS and
// PCDS types), then Istio's ambient types, built from their descriptors on
// first use. Pass it as the Resolver of proto.UnmarshalOptions and
// protojson.MarshalOptions.
var Types interface {
	protoregistry.MessageTypeResolver
	protoregistry.ExtensionTypeResolver
} = resolver{}

type resolver struct{}

var ambient = sync.OnceValues(func() (*protoregistry.Types, error) {
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(istioAmbient, set); err != nil {
		return nil, err
	}
	// The files import each other (in order) and the well-known types,
	// which every binary links.
	files := new(protoregistry.Files)
	types := new(protoregistry.Types)
	for _, fdp := range set.File {
		f, err := protodesc.NewFile(fdp, imports{files})
		if err != nil {
			return nil, err
		}
		if err := files.RegisterFile(f); err != nil {
			return nil, err
		}
		msgs := f.Messages()
		for i := range msgs.Len() {
			if err := registerMessages(types, msgs.Get(i)); err != nil {
				return nil, err
			}
		}
	}
	return types, nil
})

// imports finds a file's imports among the files built so far, then among
// those linked into the binary.
type imports struct{ built *protoregistry.Files }

func (r imports) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if f, err := r.built.FindFileByPath(path); err == nil {
		return f, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (r imports) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if d, err := r.built.FindDescriptorByName(name); err == nil {
		return d, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

func registerMessages(types *protoregistry.Types, md protoreflect.MessageDescriptor) error {
	if err := types.RegisterMessage(dynamicpb.NewMessageType(md)); err != nil {
		return err
	}
	nested := md.Messages()
	for i := range nested.Len() {
		if err := registerMessages(types, nested.Get(i)); err != nil {
			return err
		}
	}
	return nil
}

func (resolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	return globalThenAmbient(func(t *protoregistry.Types) (protoreflect.MessageType, error) { return t.FindMessageByName(name) })
}

func (resolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	return globalThenAmbient(func(t *protoregistry.Types) (protoreflect.MessageType, error) { return t.FindMessageByURL(url) })
}

// globalThenAmbient looks a message type up among those linked into the
// binary, then among Istio's ambient types; an error building the latter
// leaves the first lookup's NotFound.
func globalThenAmbient(find func(*protoregistry.Types) (protoreflect.MessageType, error)) (protoreflect.MessageType, error) {
	mt, err := find(protoregistry.GlobalTypes)
	if !errors.Is(err, protoregistry.NotFound) {
		return mt, err
	}
	types, aerr := ambient()
	if aerr != nil {
		return nil, err
	}
	return find(types)
}

func (resolver) FindExtensionByName(field protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(field)
}

func (resolver) FindExtensionByNumber(message protoreflect.FullName, field protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(message, field)
}

package codec

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// RawMessage is one gRPC message as it crossed the wire: the payload bytes, never
// decoded, held by reference.
type RawMessage struct {
	Data mem.BufferSlice
}

// Passthrough is a gRPC CodecV2 that hands frames through untouched. Unmarshal
// keeps a reference to the received buffers and Marshal gives that reference
// back to gRPC, which frees it once the bytes are written: the bytes that leave
// are the bytes that arrived, and no copy is made on the way.
type Passthrough struct{}

var _ encoding.CodecV2 = Passthrough{}

// Marshal returns the frame's buffers; gRPC takes over the reference.
func (Passthrough) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*RawMessage)
	if !ok {
		return nil, fmt.Errorf("passthrough codec: cannot marshal %T, want *codec.RawMessage", v)
	}
	data := f.Data
	f.Data = nil
	return data, nil
}

// Unmarshal keeps a reference to data, which gRPC frees when Unmarshal returns.
func (Passthrough) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*RawMessage)
	if !ok {
		return fmt.Errorf("passthrough codec: cannot unmarshal into %T, want *codec.RawMessage", v)
	}
	data.Ref()
	f.Data = data
	return nil
}

// Name is "proto" so that the content-subtype gRPC negotiates is the one every
// xDS peer expects; the codec is forced per call, never registered globally.
func (Passthrough) Name() string { return "proto" }

package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// maxMessage is the largest message any peer of the bench accepts, as the
// tap's default does.
const maxMessage = 512 << 20

// startPath starts an upstream serving handler and, in front of it, the
// middle of the path being measured. stop closes the middle, then the
// upstream, and returns the middle's error.
func startPath(start StartMiddle, handler func(method string, s grpc.ServerStream) error) (m Middle, stop func() error, err error) {
	up, err := startUpstream(handler)
	if err != nil {
		return nil, nil, err
	}
	if m, err = start(up.Addr.Addr); err != nil {
		up.Stop()
		return nil, nil, err
	}
	return m, func() error {
		err := m.Close()
		up.Stop()
		return err
	}, nil
}

// startUpstream is the load generator's control plane: a raw gRPC server
// on a loopback port that sends pre-encoded responses, so that serving is
// never the bottleneck.
func startUpstream(handler func(method string, s grpc.ServerStream) error) (*xdstest.RawUpstream, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return xdstest.NewRawUpstream(lis, func(_ any, s grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(s)
		return handler(m, s)
	}, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true})), nil
}

// dialRaw connects a load-generator client to addr.
func dialRaw(addr string) (*grpc.ClientConn, error) { return dialRawFrom(addr, nil) }

// dialRawFrom connects a load-generator client to addr from the local
// address from (nil: the system's choice). Clients spread over several
// loopback addresses are not bounded by one address's ephemeral ports.
func dialRawFrom(addr string, from net.Addr) (*grpc.ClientConn, error) {
	var opts []grpc.DialOption
	if from != nil {
		d := &net.Dialer{LocalAddr: from}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	return xdstest.Dial(tap.Address{Network: "tcp", Addr: addr}, opts...)
}

// sourceAddr is the i-th loopback source address, 127.0.0.1 onwards; nil
// for the first, which leaves the choice to the system.
func sourceAddr(i int) net.Addr {
	if i == 0 {
		return nil
	}
	return &net.TCPAddr{IP: net.IPv4(127, 0, byte((i+1)>>8), byte(i+1))}
}

var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

type msgStream interface {
	SendMsg(any) error
	RecvMsg(any) error
}

func sendMsg(s msgStream, m msg) error { return s.SendMsg(m.frame()) }

func sendBytes(s msgStream, b []byte) error { return sendMsg(s, msg{Parts: [][]byte{b}, Len: len(b)}) }

// recvHash receives one message and returns its xxhash64 and size, reading
// it in place.
func recvHash(s msgStream) (uint64, int, error) {
	f := &codec.RawMessage{}
	if err := s.RecvMsg(f); err != nil {
		return 0, 0, err
	}
	h, n := hashOf(f.Data), f.Data.Len()
	f.Data.Free()
	return h, n, nil
}

// recvRequest receives one request and decodes it with the generated types.
func recvRequest(s msgStream, into proto.Message) error {
	f := &codec.RawMessage{}
	if err := s.RecvMsg(f); err != nil {
		return err
	}
	b := f.Data.Materialize()
	f.Data.Free()
	return proto.Unmarshal(b, into)
}

// expectACK receives a SotW request and checks that it accepts nonce.
func expectACK(s msgStream, nonce string) error {
	return expectAnswer(s, new(discovery.DiscoveryRequest), nonce)
}

// expectDeltaACK receives a Delta request and checks that it accepts nonce.
func expectDeltaACK(s msgStream, nonce string) error {
	return expectAnswer(s, new(discovery.DeltaDiscoveryRequest), nonce)
}

// expectPush receives a response and checks it is want, byte for byte (by hash).
func expectPush(s msgStream, want msg, what string) error {
	h, n, err := recvHash(s)
	if err != nil {
		return fmt.Errorf("receiving %s: %w", what, err)
	}
	if h != want.Hash || n != want.Len {
		return fmt.Errorf("%s arrived altered: %d bytes with hash %016x, sent %d bytes with hash %016x", what, n, h, want.Len, want.Hash)
	}
	return nil
}

// pushAndExpectACK is the upstream's half of one push: it sends m and
// waits for the request that accepts nonce.
func pushAndExpectACK(s msgStream, m msg, nonce string) error {
	if err := sendMsg(s, m); err != nil {
		return err
	}
	return expectACK(s, nonce)
}

// acceptPush is a client's half of one push: it checks the push arrived as
// want and sends ack.
// openSynced opens a SotW stream on cc, sends initial and accepts the
// first push, want, with ack: a proxy synced, as W3 and W6 start theirs.
func openSynced(ctx context.Context, cc *grpc.ClientConn, initial []byte, want msg, ack []byte, what string) (grpc.ClientStream, error) {
	s, err := xdstest.OpenRaw(ctx, cc, methodSotW)
	if err != nil {
		return nil, err
	}
	if err := sendBytes(s, initial); err != nil {
		return nil, err
	}
	return s, acceptPush(s, want, ack, what)
}

func acceptPush(s msgStream, want msg, ack []byte, what string) error {
	if err := expectPush(s, want, what); err != nil {
		return err
	}
	return sendBytes(s, ack)
}

// errStreamNotEnded is a client's stream that went on after its last push.
var errStreamNotEnded = errors.New("the upstream sent more than the workload's pushes")

// expectEnd waits for the upstream to end the stream cleanly.
func expectEnd(s msgStream) error {
	f := &codec.RawMessage{}
	err := s.RecvMsg(f)
	if err == nil {
		f.Data.Free()
		return errStreamNotEnded
	}
	if isEOF(err) {
		return nil
	}
	return fmt.Errorf("stream ended with %w", err)
}

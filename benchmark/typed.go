package benchmark

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

// typedRelay is the usual alternative to a byte-level tap: a relay built on
// the generated xDS types, as istio-agent's xDS proxy is. Every message is
// unmarshalled into a DiscoveryRequest/Response (or their Delta forms) by
// gRPC's default proto codec on the way in and marshalled again on the way
// out; resources stay packed in their Any, as istio-agent leaves them. Like
// istio-agent, it dials a new upstream connection for each downstream stream.
type typedRelay struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	upstream string
	// pumps counts the request pumps, which may outlive their handler by a moment.
	pumps sync.WaitGroup
}

func serveTyped(lis net.Listener, upstream string) (func() error, error) {
	r := &typedRelay{upstream: upstream}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(srv, r)
	return serveRelay(srv, lis, &r.pumps), nil
}

// serveRelay serves a relay's gRPC server on lis; the function it returns
// stops it and waits for its request pumps.
func serveRelay(srv *grpc.Server, lis net.Listener, pumps *sync.WaitGroup) func() error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	return func() error {
		srv.Stop()
		err := <-served
		pumps.Wait()
		if err == grpc.ErrServerStopped {
			err = nil
		}
		return err
	}
}

func (r *typedRelay) dial() (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+r.upstream,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
}

// upstreamContext carries the client's metadata on to the upstream, less
// what gRPC sets itself.
func upstreamContext(ctx context.Context) context.Context {
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || k == "content-type" || k == "user-agent" || k == "te" || k == "grpc-timeout" {
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

func (r *typedRelay) StreamAggregatedResources(down grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	return relayStream(r, down, func(c discovery.AggregatedDiscoveryServiceClient, ctx context.Context) (grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], error) {
		return c.StreamAggregatedResources(ctx)
	})
}

func (r *typedRelay) DeltaAggregatedResources(down grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	return relayStream(r, down, func(c discovery.AggregatedDiscoveryServiceClient, ctx context.Context) (grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse], error) {
		return c.DeltaAggregatedResources(ctx)
	})
}

// relayStream dials an upstream connection for one downstream stream, as
// istio-agent does, opens the stream with open and relays it.
func relayStream[Req, Resp any](r *typedRelay, down grpc.BidiStreamingServer[Req, Resp],
	open func(discovery.AggregatedDiscoveryServiceClient, context.Context) (grpc.BidiStreamingClient[Req, Resp], error)) error {
	cc, err := r.dial()
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(upstreamContext(down.Context()))
	defer cancel()
	up, err := open(discovery.NewAggregatedDiscoveryServiceClient(cc), ctx)
	if err != nil {
		return err
	}
	return relayTyped(&r.pumps, down, up)
}

// relayTyped moves requests up on a goroutine of their own and responses
// down on the caller's, returning the upstream's status.
func relayTyped[Req, Resp any](pumps *sync.WaitGroup, down grpc.BidiStreamingServer[Req, Resp], up grpc.BidiStreamingClient[Req, Resp]) error {
	pumps.Add(1)
	go func() {
		defer pumps.Done()
		for {
			req, err := down.Recv()
			if err != nil {
				if isEOF(err) {
					up.CloseSend()
				}
				return
			}
			if err := up.Send(req); err != nil {
				return
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if err != nil {
			if isEOF(err) {
				return nil
			}
			return err
		}
		if err := down.Send(resp); err != nil {
			return err
		}
	}
}

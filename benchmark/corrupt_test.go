package benchmark_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/benchmark"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// corrupting is a middle that relays raw frames but flips the last byte of
// every nth response, counted over every middle the StartMiddle starts
// (W7 starts one per push): the workloads must notice.
type corrupting struct {
	lis   net.Listener
	srv   *grpc.Server
	cc    *grpc.ClientConn
	pumps sync.WaitGroup
}

func startCorrupting(t *testing.T, nth int) benchmark.StartMiddle {
	var n int
	var mu sync.Mutex
	return func(up string) (benchmark.Middle, error) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		cc, err := grpc.NewClient("passthrough:///"+up, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		c := &corrupting{lis: lis, cc: cc}
		c.srv = grpc.NewServer(grpc.ForceServerCodecV2(codec.Passthrough{}), grpc.UnknownServiceHandler(func(_ any, down grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(down)
			upStream, err := cc.NewStream(down.Context(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(codec.Passthrough{}))
			if err != nil {
				return err
			}
			c.pumps.Add(1)
			go func() {
				defer c.pumps.Done()
				for {
					f := &codec.RawMessage{}
					if err := down.RecvMsg(f); err != nil {
						upStream.CloseSend()
						return
					}
					if err := upStream.SendMsg(f); err != nil {
						return
					}
				}
			}()
			for {
				f := &codec.RawMessage{}
				if err := upStream.RecvMsg(f); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				mu.Lock()
				n++
				flip := n%nth == 0
				mu.Unlock()
				if flip {
					b := f.Data.Materialize()
					f.Data.Free()
					b[len(b)-1] ^= 0xff
					f.Data = mem.BufferSlice{mem.SliceBuffer(b)}
				}
				if err := down.SendMsg(f); err != nil {
					return err
				}
			}
		}))
		go c.srv.Serve(lis)
		return c, nil
	}
}

func (c *corrupting) Addr() string                            { return c.lis.Addr().String() }
func (c *corrupting) Begin() error                            { return nil }
func (c *corrupting) End() (benchmark.Window, error)          { return benchmark.Window{}, nil }
func (c *corrupting) Sample() (benchmark.Usage, error)        { return benchmark.Usage{}, nil }
func (c *corrupting) SampleAfterGC() (benchmark.Usage, error) { return benchmark.Usage{}, nil }
func (c *corrupting) Close() error {
	c.srv.Stop()
	c.cc.Close()
	c.pumps.Wait()
	return nil
}

// A middle that alters a push fails every workload: the checks are real.
func TestAlteredPushIsCaught(t *testing.T) {
	leakcheck.Check(t)
	for _, w := range benchmark.Workloads(benchmark.TinySizes()) {
		t.Run(w.ID(), func(t *testing.T) {
			_, err := w.Run(context.Background(), startCorrupting(t, 2))
			if err == nil || !strings.Contains(err.Error(), "arrived altered") {
				t.Fatalf("%s through a corrupting middle: err = %v, want a push that arrived altered", w.ID(), err)
			}
		})
	}
}

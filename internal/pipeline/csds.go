package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"

	"github.com/adstap/adstap/export/csds"
)

// csdsServer serves the per-proxy status (CSDS, and istioctl's syncz over
// ADS) on a listener of its own, never the relay's: it discloses every
// proxy's configuration, so it is on loopback unless told otherwise.
type csdsServer struct {
	lis  net.Listener
	srv  *grpc.Server
	done sync.WaitGroup
}

func startCSDS(addr string, csds *csds.CSDS, syncz *csds.Syncz, log *slog.Logger) (*csdsServer, error) {
	if !isLoopbackHost(addr) {
		log.Warn("the CSDS address is reachable from outside this host; it shows every proxy's configuration", "csds", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	c := &csdsServer{lis: lis, srv: grpc.NewServer(grpc.MaxConcurrentStreams(64))}
	csds.Register(c.srv)
	syncz.Register(c.srv)
	reflection.Register(c.srv) // so that grpcurl needs no proto files
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		if err := c.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("CSDS server stopped", "err", err)
		}
	}()
	return c, nil
}

func (c *csdsServer) addr() string { return c.lis.Addr().String() }

// close ends the open CSDS streams at once: they only read.
func (c *csdsServer) close() {
	c.srv.Stop()
	c.done.Wait()
}

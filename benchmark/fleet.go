package benchmark

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// fleetOpeners bounds how many clients of a fleet connect at once.
const fleetOpeners = 32

// fleet is many load-generator clients, one connection each (one proxy each).
type fleet struct {
	conns []*grpc.ClientConn
	errs  *firstError
	done  chan struct{} // closed once every client has returned
}

// startFleet connects n clients to addr, spread over sources loopback
// addresses, and runs client i on its connection. fleetOpeners connect at a
// time, each going on to the next client once the previous one called ready
// (or returned), so the middle sees a crowd arrive, not a burst of connects.
func startFleet(ctx context.Context, addr string, n, sources int, client func(cc *grpc.ClientConn, i int, ready func()) error) *fleet {
	f := &fleet{conns: make([]*grpc.ClientConn, n), errs: newFirstError(), done: make(chan struct{})}
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(fleetOpeners, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				cc, err := dialRawFrom(addr, sourceAddr(i%max(1, sources)))
				if err != nil {
					f.errs.set(err)
					return
				}
				f.conns[i] = cc
				opened := make(chan struct{})
				ready := sync.OnceFunc(func() { close(opened) })
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer ready()
					f.errs.set(client(cc, i, ready))
				}()
				select {
				case <-opened:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(f.done)
	}()
	return f
}

// closeConns closes the clients' connections, once done is closed.
func (f *fleet) closeConns() {
	for _, cc := range f.conns {
		if cc != nil {
			cc.Close()
		}
	}
}

// waitFor waits until ch is closed, or says why it never will be: a client
// or the upstream (whose errors are in upstream) failed, every client ended
// first, or ctx ended. what names what ch stands for.
func (f *fleet) waitFor(ctx context.Context, upstream *firstError, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-f.done:
		return firstOf(upstream.get(), f.errs.get(), fmt.Errorf("clients ended before %s", what))
	case <-f.errs.failed:
		return firstOf(f.errs.get(), upstream.get())
	case <-upstream.failed:
		return firstOf(upstream.get(), f.errs.get())
	case <-ctx.Done():
		return firstOf(upstream.get(), f.errs.get(), fmt.Errorf("%s: %w", what, ctx.Err()))
	}
}

// end waits for every client to return, then gives the first failure of a
// client or of the upstream, if any.
func (f *fleet) end(ctx context.Context, upstream *firstError) error {
	select {
	case <-f.done:
	case <-ctx.Done():
		return fmt.Errorf("streams did not end: %w", ctx.Err())
	}
	return firstOf(upstream.get(), f.errs.get())
}

package tap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adstap/adstap/codec"
)

// connectTiming follows one dial through its phases. The dial and the
// handshake that follows it run one after the other, never at once.
type connectTiming struct {
	c codec.UpstreamConnect
}

// timedConn carries a dial's timing to the TLS handshake that follows it.
type timedConn struct {
	net.Conn
	timing *connectTiming
}

func dialTimed(ctx context.Context, up Address, t *connectTiming) (net.Conn, error) {
	var dialer net.Dialer
	if up.Network == "unix" {
		start := time.Now()
		conn, err := dialer.DialContext(ctx, "unix", up.Addr)
		t.c.TCP = time.Since(start)
		if err != nil {
			t.c.FailedPhase, t.c.Err = "tcp", err
		}
		return conn, err
	}
	host, port, err := net.SplitHostPort(up.Addr)
	if err != nil {
		t.c.FailedPhase, t.c.Err = "tcp", err
		return nil, err
	}
	ips := []string{host}
	if net.ParseIP(host) == nil {
		start := time.Now()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		t.c.DNS = time.Since(start)
		if err != nil {
			t.c.FailedPhase, t.c.Err = "dns", err
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
		ips = addrs
	}
	start := time.Now()
	var errs []error
	for _, ip := range ips {
		conn, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip, port))
		if err == nil {
			t.c.TCP = time.Since(start)
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	t.c.TCP = time.Since(start)
	t.c.FailedPhase, t.c.Err = "tcp", errors.Join(errs...)
	return nil, t.c.Err
}

// maxPendingConnects bounds the connect reports waiting for the observer;
// past it they are dropped (and counted in Server.DroppedConnectReports).
const maxPendingConnects = 1024

// connectReports hands upstream connect reports over from a goroutine that
// lives while there are reports to hand over.
type connectReports struct {
	mu      sync.Mutex
	pending []codec.UpstreamConnect
	idle    chan struct{} // non-nil while the goroutine runs; closed when it ends
	closed  bool
	dropped atomic.Uint64
}

func (r *connectReports) queue(c codec.UpstreamConnect, deliver func(codec.UpstreamConnect)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.pending) >= maxPendingConnects {
		r.dropped.Add(1)
		return
	}
	r.pending = append(r.pending, c)
	if r.idle == nil {
		idle := make(chan struct{})
		r.idle = idle
		go r.run(deliver, idle)
	}
}

func (r *connectReports) run(deliver func(codec.UpstreamConnect), idle chan struct{}) {
	defer close(idle)
	for {
		r.mu.Lock()
		batch := r.pending
		r.pending = nil
		if len(batch) == 0 {
			r.idle = nil
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for _, c := range batch {
			deliver(c)
		}
	}
}

// close takes no more reports and waits, until ctx is done, for those
// queued to be handed over.
func (r *connectReports) close(ctx context.Context) {
	r.mu.Lock()
	r.closed = true
	idle := r.idle
	r.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
}

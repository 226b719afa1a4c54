package reliability

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// ProxyMode is how a FaultProxy treats connections.
type ProxyMode int

const (
	// Forward relays every connection to the target: the peer is up.
	Forward ProxyMode = iota
	// Refuse listens on nothing: connections are refused, as on a closed port.
	Refuse
	// Silent accepts connections and never reads or writes a byte: a peer
	// that is wedged, or a black-holing middlebox.
	Silent
)

func (m ProxyMode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Refuse:
		return "refuse"
	case Silent:
		return "silent"
	}
	return fmt.Sprintf("ProxyMode(%d)", int(m))
}

// FaultProxy is a TCP proxy on a fixed loopback address in front of a real
// peer, whose behaviour a test switches: forwarding, refusing, silent. Every
// switch drops the connections it had, as a peer that restarts does, so the
// address stays the same while the peer behind it comes and goes.
type FaultProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	mode  ProxyMode
	lis   net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartFaultProxy forwards a free loopback port to target. It is closed at cleanup.
func StartFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("reliability: proxy listen: %v", err)
	}
	p := &FaultProxy{target: target, addr: lis.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(lis, Forward)
	t.Cleanup(func() { p.Set(Refuse) })
	return p
}

// Addr is the proxy's address, the same in every mode.
func (p *FaultProxy) Addr() string { return p.addr }

// Set drops every connection and the listener, then takes up mode on the
// same address.
func (p *FaultProxy) Set(mode ProxyMode) error {
	p.mu.Lock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.mode = mode
	p.mu.Unlock()
	p.wg.Wait()
	if mode == Refuse {
		return nil
	}
	var lis net.Listener
	var err error
	for try := 0; try < 50; try++ {
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("reliability: proxy listen again on %s: %w", p.addr, err)
	}
	p.serve(lis, mode)
	return nil
}

func (p *FaultProxy) serve(lis net.Listener, mode ProxyMode) {
	p.mu.Lock()
	p.lis = lis
	p.mode = mode
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if !p.track(c) {
				c.Close()
				return
			}
			if mode == Forward {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					p.forward(c)
				}()
			}
		}
	}()
}

// track remembers c so that a switch closes it; false once the listener it
// came from is gone.
func (p *FaultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *FaultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *FaultProxy) forward(c net.Conn) {
	defer p.untrack(c)
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

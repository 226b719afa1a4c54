package tap_test

import (
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// Envoy and istio-agent ping their control plane, often with no stream open
// yet. gRPC's default policy answers pings more often than every 5 minutes
// with GOAWAY too_many_pings after two strikes; the tap must not.
func TestClientKeepalivePingsAreAccepted(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&digestLog{}))
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	c, err := net.Dial("tcp", addr.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	const pings = 5
	acks := 0
	next := time.Now()
	sent := 0
	for acks < pings {
		if sent < pings && !time.Now().Before(next) {
			if err := fr.WritePing(false, [8]byte{byte(sent)}); err != nil {
				t.Fatalf("ping %d: %v", sent, err)
			}
			sent++
			next = time.Now().Add(1100 * time.Millisecond)
		}
		deadline := time.Now().Add(2 * time.Second)
		if sent < pings {
			deadline = next
		}
		c.SetReadDeadline(deadline)
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			t.Fatalf("after %d ping ACKs: %v", acks, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if f.IsAck() {
				acks++
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v (%q) after %d pings", f.ErrCode, f.DebugData(), acks)
		}
	}
}

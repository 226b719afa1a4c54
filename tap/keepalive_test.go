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
	// Only a hang reaches this bound.
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	// Each ping goes a little over the tap's minimum interval after the
	// previous one's ACK came back, so the tap, which noted the previous
	// ping before acknowledging it, sees them at least that far apart
	// however late a loaded machine delivers either. gRPC's default policy
	// would still answer the fourth with GOAWAY.
	const pings, spacing = 5, 1100 * time.Millisecond
	acks := 0
	var next time.Time // when to send the next ping; zero while one awaits its ACK
	sent := 0
	for acks < pings {
		if sent == acks && !time.Now().Before(next) {
			if err := fr.WritePing(false, [8]byte{byte(sent)}); err != nil {
				t.Fatalf("ping %d: %v", sent, err)
			}
			sent++
		}
		if sent > acks {
			c.SetReadDeadline(time.Now().Add(time.Minute)) // waiting for the ACK: only a hang times out
		} else {
			c.SetReadDeadline(next)
		}
		f, err := fr.ReadFrame()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && sent == acks {
				continue // time for the next ping
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
				next = time.Now().Add(spacing)
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v (%q) after %d pings", f.ErrCode, f.DebugData(), acks)
		}
	}
}

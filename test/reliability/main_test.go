package reliability_test

import (
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/test/reliability"
)

// The child upstream that TestUpstreamKilledMidPush kills is this binary.
func init() { reliability.RunChildIfAsked() }

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

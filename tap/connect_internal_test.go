package tap

import (
	"context"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestConnectReportsPastTheBoundAreCounted: with the observer stuck, the
// reports past maxPendingConnects are dropped, never waited for, and so are
// those that come after Shutdown; DroppedConnectReports counts each of them.
func TestConnectReportsPastTheBoundAreCounted(t *testing.T) {
	leakcheck.Check(t)
	s := &Server{}
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	delivered := 0
	deliver := func(codec.UpstreamConnect) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		delivered++
	}

	// The first report is with the observer, which is stuck: nothing waits.
	s.connects.queue(codec.UpstreamConnect{}, deliver)
	<-entered
	for range maxPendingConnects {
		s.connects.queue(codec.UpstreamConnect{}, deliver)
	}
	if got := s.DroppedConnectReports(); got != 0 {
		t.Fatalf("DroppedConnectReports with %d reports waiting = %d, want 0", maxPendingConnects, got)
	}
	for range 3 {
		s.connects.queue(codec.UpstreamConnect{}, deliver)
	}
	if got := s.DroppedConnectReports(); got != 3 {
		t.Fatalf("DroppedConnectReports after 3 reports past the bound = %d, want 3", got)
	}

	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s.connects.close(ctx)
	if ctx.Err() != nil {
		t.Fatalf("the queued reports were not handed over within %v", waitTimeout)
	}
	if want := 1 + maxPendingConnects; delivered != want {
		t.Errorf("delivered %d reports, want %d", delivered, want)
	}
	s.connects.queue(codec.UpstreamConnect{}, deliver)
	if got := s.DroppedConnectReports(); got != 4 {
		t.Errorf("DroppedConnectReports after a report past Shutdown = %d, want 4", got)
	}
}

//go:build demo

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// TestDemoShowsPushesNACKsAStormAndRecovery runs `adstap demo` fast and reads
// its live log for what the README promises a newcomer.
func TestDemoShowsPushesNACKsAStormAndRecovery(t *testing.T) {
	leakcheck.Check(t)
	ctx, stop := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runCLI(ctx, []string{"demo", "--interval=300ms", "--admin=127.0.0.1:0"}, &out, &out)
	}()
	want := []string{
		"debug/streams",              // the banner's admin URL
		"full sync complete",         // connect phases end
		" ACK ",                      // pushes accepted
		"NACK",                       // the bad cluster rejected...
		`unexpected lbPolicy MAGLEV`, // ...with the client's own words
		"MAGLEV — from DestinationRule demo/greeter-maglev", // ...and the object to fix
		"NACK storm started",                      // the detector fires
		"NACK loop ended",                         // and the fix ends the loop
		"+1 -0 ~0",                                // a diff with an added resource
		"full(repeated) redundant",                // SotW re-sending unchanged config
		"full push v=",                            // go-control-plane resends configuration at each version
		"repeated full syncs started",             // more than one full push a minute: the alarm rises on purpose
		"node=proxyless~127.0.0.1~greeter-client", // both clients are seen
		"node=sidecar~127.0.0.1~productpage",
	}
	missing := func() string {
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				return w
			}
		}
		return ""
	}
	if !xdstest.Until(30*time.Second, func() bool { return missing() == "" }) {
		stop()
		<-exited
		t.Fatalf("the demo's output lacks %q after 30s:\n%s", missing(), out.String())
	}
	stop()
	select {
	case code := <-exited:
		if code != exitOK {
			t.Errorf("demo exited %d, want 0", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the demo did not stop after Ctrl-C")
	}
}

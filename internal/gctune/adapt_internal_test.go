package gctune

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/leakcheck"
)

func TestPercent(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		base uint64
		want int
	}{
		{0, DefaultPercent},
		{32 << 20, DefaultPercent},
		{ExtraHeadroom, DefaultPercent},
		{2 * ExtraHeadroom, 150},
		{192 << 20, 133},
		{1 << 30, 106},
		{64 << 30, 100},
	}
	for _, tc := range tests {
		if got := Percent(tc.base); got != tc.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", tc.base>>20, got, tc.want)
		}
	}
}

// adapt follows what the collector scans: down as the heap grows past
// ExtraHeadroom, back to DefaultPercent when it shrinks.
func TestAdapt(t *testing.T) {
	leakcheck.Check(t)
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	steps := []struct {
		base uint64
		want int
	}{
		{1 << 30, 106},
		{1 << 30, 106},
		{192 << 20, 133},
		{170 << 20, 133}, // 137: too small a change to make
		{16 << 20, DefaultPercent},
	}
	ctx, cancel := context.WithCancel(context.Background())
	entered, next := make(chan struct{}), make(chan uint64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		adapt(ctx, time.Millisecond, func() uint64 {
			select {
			case entered <- struct{}{}:
			case <-ctx.Done():
				return 0
			}
			select {
			case b := <-next:
				return b
			case <-ctx.Done():
				return 0
			}
		})
	}()
	for _, s := range steps {
		<-entered
		next <- s.base
		// adapt is reading again: what it read before is in force.
		<-entered
		if got := debug.SetGCPercent(-1); got != s.want {
			t.Errorf("after scanning %d MiB: GC percent %d, want %d", s.base>>20, got, s.want)
		}
		debug.SetGCPercent(s.want)
		next <- s.base
	}
	cancel()
	<-done
}

func TestStartLeavesTheUsersGOGC(t *testing.T) {
	leakcheck.Check(t)
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	stop := Start(Settings{Percent: 150, PercentSource: "GOGC"}, time.Millisecond)
	stop()
	if got := debug.SetGCPercent(-1); got != 150 {
		t.Errorf("GC percent %d after Start with the user's GOGC=150, want it left alone", got)
	}
	debug.SetGCPercent(150)
}

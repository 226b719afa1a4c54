//go:build unix

package recorder_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// TestCaptureHoldsOneFrameBeyondItsQueue: while a frame larger than the
// queue waits for the disk, a second such frame is dropped at once — its
// buffers let go, a gap in its place — and small frames still queue within
// the bound. Every frame's buffers are let go once it is written, and the
// large one is written whole.
func TestCaptureHoldsOneFrameBeyondItsQueue(t *testing.T) {
	leakcheck.Check(t)
	fifo := syncbuf.NewFIFO(t) // the disk stalls
	w, err := capture.NewWriter(fifo.Path, 0, 1, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	const queue = 64 << 10
	c := recorder.New(recorder.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: queue}, Writer: w})
	at := time.Now()
	c.Record(capture.Record{Time: at, Kind: capture.KindOpen, Stream: 1, Method: ads, Protocol: string(codec.Opaque)})
	var pool countingPool
	first := received(bytes.Repeat([]byte{'a'}, 4*queue), &pool)
	second := received(bytes.Repeat([]byte{'b'}, 4*queue), &pool)
	small := received(bytes.Repeat([]byte{'s'}, 2<<10), &pool) // above gRPC's pooling threshold
	frame := capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "response"}
	c.Frame(frame, first) // held beyond the queue; the writer is stuck in it
	c.Frame(frame, second)
	if got := pool.returned.Load(); got != int64(len(second)) {
		t.Errorf("%d buffers given back, want the second large frame's %d, dropped at once", got, len(second))
	}
	c.Frame(frame, small)
	c.Record(capture.Record{Time: at, Kind: capture.KindClose, Stream: 1, Code: "OK"})
	fifo.Release()
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := pool.returned.Load(), int64(len(first)+len(second)+len(small)); got != want {
		t.Errorf("%d buffers given back, want all %d", got, want)
	}
	rd := capture.NewReader(bytes.NewReader(fifo.Written()), "fifo")
	var got []string
	for {
		r, err := rd.Next()
		if err != nil {
			break
		}
		got = append(got, r.Kind+" "+string(r.Message[:min(len(r.Message), 5)]))
		if r.Kind == capture.KindFrame && len(r.Message) != 2<<10 && len(r.Message) != 4*queue {
			t.Errorf("a frame of %d bytes captured", len(r.Message))
		}
	}
	want := []string{"capture ", "open ", "frame aaaaa", "gap ", "frame sssss", "close "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestCaptureLetsGoOfWhatItDropsAtClose: frames still queued when Close's
// deadline passes are dropped, and their buffers let go — at once, or,
// for those the capture's goroutine had taken up already, when the write
// in hand returns.
func TestCaptureLetsGoOfWhatItDropsAtClose(t *testing.T) {
	leakcheck.Check(t)
	fifo := syncbuf.NewFIFO(t)
	w, err := capture.NewWriter(fifo.Path, 0, 1, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	c := recorder.New(recorder.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: 1 << 20}, Writer: w})
	at := time.Now()
	c.Record(capture.Record{Time: at, Kind: capture.KindOpen, Stream: 1, Method: ads, Protocol: string(codec.Opaque)})
	var pool countingPool
	var all int64
	for range 8 {
		data := received(bytes.Repeat([]byte{'f'}, 100<<10), &pool) // 8 of them fill the pipe's buffer
		all += int64(len(data))
		c.Frame(capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "response"}, data)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Close(ctx); err == nil {
		t.Fatal("Close met its deadline with the file stalled")
	}
	if c.Dropped() == 0 {
		t.Error("nothing counted dropped at Close")
	}
	fifo.Release()
	xdstest.Eventually(t, "every buffer let go", func() bool { return pool.returned.Load() == all })
}

package track

import (
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

const sotwMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// pushAndACK pushes one CDS cluster to stream id and ACKs it.
func pushAndACK(tr *Tracker, id uint64, at time.Time) []Event {
	resp := &codec.Response{TypeURL: codec.TypeCluster, VersionInfo: "1", Nonce: "n1",
		Resources: []codec.Resource{{Name: []byte("c1"), Hash: 1}}}
	evs := tr.Response(id, at, resp, 100)
	return append(evs, tr.Request(id, at, &codec.Request{TypeURL: codec.TypeCluster, VersionInfo: "1", ResponseNonce: "n1"}, 10)...)
}

// within fails the test unless f returns within d: a stream that waited
// for another would never return here, since the other is held for good.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s waited on another stream", what)
	}
}

// TestStreamsNeverWaitForEachOther holds one stream as a long diff would
// and checks that the frames of another stream, a new stream, the debug
// page and the sweep of the other streams all go on.
func TestStreamsNeverWaitForEachOther(t *testing.T) {
	leakcheck.Check(t)
	tr := New(Config{})
	at := time.Unix(1000, 0)
	for id := range uint64(3) {
		tr.OpenStream(StreamMeta{ID: id + 1, Method: sotwMethod, OpenedAt: at})
		tr.Request(id+1, at, &codec.Request{TypeURL: codec.TypeCluster, Node: &codec.NodeIdentity{ID: "n"}}, 10)
	}
	held := tr.lock(2)
	if held == nil {
		t.Fatal("stream 2 is not tracked")
	}
	unlock := held.unlock
	defer func() { unlock() }()

	within(t, 10*time.Second, "a push on stream 1", func() {
		if evs := pushAndACK(tr, 1, at.Add(time.Second)); len(evs) == 0 {
			t.Error("no events for a push and its ACK")
		}
	})
	within(t, 10*time.Second, "a new stream", func() {
		tr.OpenStream(StreamMeta{ID: 4, Method: sotwMethod, OpenedAt: at})
	})
	// The sweep takes streams in id order and stops at the held one; the
	// streams it is not holding take frames meanwhile.
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		tr.Tick(at.Add(2 * time.Second))
	}()
	within(t, 10*time.Second, "a push on stream 3 during the sweep", func() { pushAndACK(tr, 3, at.Add(2*time.Second)) })
	within(t, 10*time.Second, "a push on stream 1 during the sweep", func() { pushAndACK(tr, 1, at.Add(3*time.Second)) })
	unlock()
	unlock = func() {}
	<-swept
}

package origin

import (
	"runtime"
	"testing"
	"weak"

	"google.golang.org/grpc/mem"
)

// The span queue's Scanner reads push after push: what it keeps for the
// next one holds nothing of the last, whose bytes its caller lets go of.
func TestScannerKeepsNothingOfThePush(t *testing.T) {
	var sc Scanner
	found, pushed := func() (int, weak.Pointer[byte]) {
		data, _ := meshPush(t)
		b := data.Materialize()
		data.Free()
		s := sc.stampedIn(mem.BufferSlice{mem.SliceBuffer(b)}, false, func(int) bool { return false })
		return len(s.Objects), weak.Make(&b[0])
	}()
	if found == 0 {
		t.Fatal("no objects found in the push")
	}
	runtime.GC()
	if pushed.Value() != nil {
		t.Error("the push's bytes are still reachable from the Scanner after a collection")
	}
	runtime.KeepAlive(&sc)
}

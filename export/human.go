package export

// The words for what adstap shows people — latencies, sizes, detector names —
// the same in the live log and in adstap inspect.

import (
	"fmt"
	"strings"
	"time"

	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// TypeLabel is the name operators use for a type (CDS, EDS, ...), or the
// message name for a type without one.
func TypeLabel(typeURL string) string { return shared.TypeLabel(typeURL) }

// Plural says n of something: "1 cluster", "3 clusters".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// ListSome names up to 20 items, and how many more there are.
func ListSome(items []string) string {
	const most = 20
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
}

// Latency is short and keeps sub-millisecond answers visible: 0.31ms, 14ms, 1.2s.
func Latency(d time.Duration) string { return string(shared.AppendLatency(nil, d)) }

// Size is a size with one decimal in KB or MB (binary): 850B, 1.2KB, 9.8MB.
func Size(n int) string { return string(shared.AppendSize(nil, n)) }

// DetectorName names one of the tracker's detectors in words.
func DetectorName(d string) string {
	switch d {
	case track.DetectorNACKStorm:
		return "NACK storm"
	case track.DetectorNACKLoop:
		return "NACK loop"
	case track.DetectorRepeatedFullSync:
		return "repeated full syncs"
	case track.DetectorReconnectHerd:
		return "reconnect herd"
	}
	return d
}

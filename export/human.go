package export

// The words for what adstap shows people — latencies, sizes, detector names —
// the same in the live log and in adstap inspect.

import (
	"strconv"
	"time"

	"github.com/adstap/adstap/track"
)

// Latency is short and keeps sub-millisecond answers visible: 0.31ms, 14ms, 1.2s.
func Latency(d time.Duration) string { return string(appendLatency(nil, d)) }

// appendLatency appends Latency(d) to b, without allocating for the common
// cases: the live log writes one per push.
func appendLatency(b []byte, d time.Duration) []byte {
	switch {
	case d < time.Millisecond:
		b = strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 2, 64)
		return append(b, "ms"...)
	case d < time.Second:
		// Whole milliseconds under a second print as Duration.String
		// prints them ("14ms"), without its string.
		if r := d.Round(time.Millisecond); r < time.Second {
			b = strconv.AppendInt(b, int64(r/time.Millisecond), 10)
			return append(b, "ms"...)
		}
		return append(b, d.Round(time.Millisecond).String()...)
	}
	return append(b, d.Round(100*time.Millisecond).String()...)
}

// Size is a size with one decimal in KB or MB (binary): 850B, 1.2KB, 9.8MB.
func Size(n int) string { return string(appendSize(nil, n)) }

// appendSize appends Size(n) to b.
func appendSize(b []byte, n int) []byte {
	switch {
	case n >= 1<<20:
		b = strconv.AppendFloat(b, float64(n)/(1<<20), 'f', 1, 64)
		return append(b, "MB"...)
	case n >= 1<<10:
		b = strconv.AppendFloat(b, float64(n)/(1<<10), 'f', 1, 64)
		return append(b, "KB"...)
	}
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, 'B')
}

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

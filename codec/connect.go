package codec

import "time"

// UpstreamConnect is how one upstream connection came up, phase by phase: the
// seed's DNS, TCP and TLS. A phase that did not happen (an IP address, a Unix
// socket, plaintext) has a zero duration. The relay measures it and the
// tracker passes it on, so it lives below both.
type UpstreamConnect struct {
	ConnID   uint64 // the downstream connection the upstream serves
	Upstream string
	Start    time.Time
	DNS      time.Duration
	TCP      time.Duration
	TLS      time.Duration
	// FailedPhase is "dns", "tcp" or "tls" when that phase failed, with Err.
	FailedPhase string
	Err         error
}

package export

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// The reasons an upstream connection fails, as adstap_upstream_failing's
// reason label and UpstreamState.Reason say them: a fixed set, so the label
// stays bounded whatever the errors say.
const (
	ReasonCertificateExpired = "certificate_expired"
	ReasonUnknownAuthority   = "unknown_authority"
	ReasonWrongName          = "wrong_name"
	ReasonTLS                = "tls"
	ReasonDNS                = "dns"
	ReasonRefused            = "refused"
	ReasonTimeout            = "timeout"
	ReasonTCP                = "tcp"
)

// UpstreamReasons are the reasons in the order the metrics list them.
var UpstreamReasons = []string{ReasonCertificateExpired, ReasonUnknownAuthority, ReasonWrongName, ReasonTLS, ReasonDNS, ReasonRefused, ReasonTimeout, ReasonTCP}

// upstreamReasonWords say each reason to an operator.
var upstreamReasonWords = map[string]string{
	ReasonCertificateExpired: "the control plane's certificate has expired (or is not valid yet)",
	ReasonUnknownAuthority:   "the control plane's certificate is signed by an authority the tap does not trust (--upstream-ca)",
	ReasonWrongName:          "the control plane's certificate is not valid for the name the tap checks (--upstream-server-name)",
	ReasonTLS:                "the TLS handshake with the control plane failed",
	ReasonDNS:                "the control plane's name does not resolve",
	ReasonRefused:            "the control plane refused the connection (nothing listens there)",
	ReasonTimeout:            "connecting to the control plane timed out",
	ReasonTCP:                "the connection to the control plane failed",
}

// UpstreamReasonWords says a reason in words; "" for an unknown one.
func UpstreamReasonWords(reason string) string { return upstreamReasonWords[reason] }

// UpstreamReason classifies why an upstream connection failed, from the
// phase that failed and its error.
func UpstreamReason(phase string, err error) string {
	var (
		invalid   x509.CertificateInvalidError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		dnsErr    *net.DNSError
		netErr    net.Error
		recordErr tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return ReasonCertificateExpired
	case errors.As(err, &authority):
		return ReasonUnknownAuthority
	case errors.As(err, &hostname):
		return ReasonWrongName
	case errors.As(err, &dnsErr) || phase == "dns":
		if dnsErr != nil && dnsErr.IsTimeout {
			return ReasonTimeout
		}
		return ReasonDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	case phase == "tls" || errors.As(err, &recordErr):
		return ReasonTLS
	}
	return ReasonTCP
}

// UpstreamState is how the tap's connections to its control plane fare, as
// /debug/streams, adstap status and the live page show it.
type UpstreamState struct {
	// Address is the control plane dialed; "" before the first attempt.
	Address string `json:"address"`
	// State is "unknown" before any connection was attempted (no client
	// has connected yet), "failing" when the latest attempt failed, else "ok".
	State string `json:"state"`
	// Reason is one of UpstreamReasons, and Words says it, while failing.
	Reason string `json:"reason,omitempty"`
	Words  string `json:"words,omitempty"`
	// Error is the latest failure's error, as the tap's log says it.
	Error string `json:"error,omitempty"`
	// Phase is the phase that failed: dns, tcp or tls.
	Phase string `json:"phase,omitempty"`
	// FailedAttempts counts the attempts that failed since the last that
	// succeeded (since the start when none has).
	FailedAttempts int       `json:"failed_attempts"`
	LastSuccess    time.Time `json:"last_success,omitzero"`
	LastFailure    time.Time `json:"last_failure,omitzero"`
}

// The values of UpstreamState.State.
const (
	UpstreamUnknown = "unknown"
	UpstreamOK      = "ok"
	UpstreamFailing = "failing"
)

// UpstreamHealth follows the outcome of every upstream connection attempt
// (track.UpstreamConnected), for the status, the page and the metrics. A
// client that cannot get its configuration because the control plane's
// certificate expired has no stream to show: this is where it shows.
type UpstreamHealth struct {
	mu sync.Mutex
	st UpstreamState
}

var _ track.Sink = (*UpstreamHealth)(nil)

// NewUpstreamHealth returns a health record with no attempt yet.
func NewUpstreamHealth() *UpstreamHealth {
	return &UpstreamHealth{st: UpstreamState{State: UpstreamUnknown}}
}

// OnEvent records the outcome of an upstream connection.
func (u *UpstreamHealth) OnEvent(e track.Event) {
	c, ok := e.(track.UpstreamConnected)
	if !ok {
		return
	}
	u.record(c.UpstreamConnect)
}

func (u *UpstreamHealth) record(c codec.UpstreamConnect) {
	at := c.Start.Add(c.DNS + c.TCP + c.TLS)
	shared.Taking("upstream.mu")
	u.mu.Lock()
	defer u.mu.Unlock()
	u.st.Address = c.Upstream
	if c.Err == nil {
		u.st = UpstreamState{Address: c.Upstream, State: UpstreamOK, LastSuccess: at, LastFailure: u.st.LastFailure}
		return
	}
	reason := UpstreamReason(c.FailedPhase, c.Err)
	u.st.State, u.st.Reason, u.st.Words, u.st.Phase = UpstreamFailing, reason, upstreamReasonWords[reason], c.FailedPhase
	u.st.Error = codec.Text([]byte(c.Err.Error())) // a DNS name or a certificate field may not be UTF-8
	u.st.FailedAttempts++
	u.st.LastFailure = at
}

// State returns the latest state; nil-safe (a nil record is unknown).
func (u *UpstreamHealth) State() UpstreamState {
	if u == nil {
		return UpstreamState{State: UpstreamUnknown}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

// Summary is the state in one line, for the status and the log.
func (s UpstreamState) Summary() string {
	name := "upstream"
	if s.Address != "" {
		name += " " + s.Address
	}
	switch s.State {
	case UpstreamFailing:
		var b strings.Builder
		b.WriteString(name + " FAILING: ")
		if s.Words != "" {
			b.WriteString(s.Words)
		} else {
			b.WriteString(s.Reason)
		}
		b.WriteString("; " + plural(s.FailedAttempts, "attempt") + " failed since the last success")
		return b.String()
	case UpstreamOK:
		return name + " connected"
	}
	return name + ": no connection attempted yet (no client has connected)"
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

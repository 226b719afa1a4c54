// Package upstream follows how the tap's connections to its control plane fare, and says why one failed in words.
package upstream

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
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// The reasons an upstream connection fails, as adstap_upstream_failing's
// reason label and State.Reason say them: a fixed set, so the label
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

// Reasons are the reasons in the order the metrics list them.
var Reasons = []string{ReasonCertificateExpired, ReasonUnknownAuthority, ReasonWrongName, ReasonTLS, ReasonDNS, ReasonRefused, ReasonTimeout, ReasonTCP}

// reasonWords say each reason to an operator.
var reasonWords = map[string]string{
	ReasonCertificateExpired: "the control plane's certificate has expired (or is not valid yet)",
	ReasonUnknownAuthority:   "the control plane's certificate is signed by an authority the tap does not trust (--upstream-ca)",
	ReasonWrongName:          "the control plane's certificate is not valid for the name the tap checks (--upstream-server-name)",
	ReasonTLS:                "the TLS handshake with the control plane failed",
	ReasonDNS:                "the control plane's name does not resolve",
	ReasonRefused:            "the control plane refused the connection (nothing listens there)",
	ReasonTimeout:            "connecting to the control plane timed out",
	ReasonTCP:                "the connection to the control plane failed",
}

// ReasonWords says a reason in words; "" for an unknown one.
func ReasonWords(reason string) string { return reasonWords[reason] }

// Reason classifies why an upstream connection failed, from the
// phase that failed and its error.
func Reason(phase string, err error) string {
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

// State is how the tap's connections to its control plane fare, as
// /debug/streams, adstap status and the live page show it.
type State struct {
	// Address is the control plane dialed; "" before the first attempt.
	Address string `json:"address"`
	// State is "unknown" before any connection was attempted (no client
	// has connected yet), "failing" when the latest attempt failed, else "ok".
	State string `json:"state"`
	// Reason is one of Reasons, and Words says it, while failing.
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

// The values of State.State.
const (
	Unknown = "unknown"
	OK      = "ok"
	Failing = "failing"
)

// Health follows the outcome of every upstream connection attempt
// (track.UpstreamConnected), for the status, the page and the metrics. A
// client that cannot get its configuration because the control plane's
// certificate expired has no stream to show: this is where it shows.
//
// It is an output (export.UpstreamOutput) with no queue: each attempt is
// recorded on the goroutine that tells it, so nothing waits and nothing is
// dropped.
type Health struct {
	mu sync.Mutex
	st State
}

var (
	_ track.Sink    = (*Health)(nil)
	_ export.Output = (*Health)(nil)
)

// Config shapes the upstream's health. Its OutputConfig is unused: the
// health has no queue and nothing to say in the log, whose lines about
// each attempt are the live log's.
type Config struct {
	export.OutputConfig
}

// New returns a health record with no attempt yet.
func New(Config) *Health {
	return &Health{st: State{State: Unknown}}
}

// Name is export.UpstreamOutput.
func (u *Health) Name() string { return export.UpstreamOutput }

// Dropped is 0: every attempt it is told of is recorded. The reports the
// relay dropped before they reached it are the relay's
// (adstap_upstream_connect_reports_dropped_total).
func (u *Health) Dropped() uint64 { return 0 }

// Close has nothing to write out; the state stays readable.
func (u *Health) Close(context.Context) error { return nil }

// OnEvent records the outcome of an upstream connection.
func (u *Health) OnEvent(e track.Event) {
	c, ok := e.(track.UpstreamConnected)
	if !ok {
		return
	}
	u.record(c.UpstreamConnect)
}

func (u *Health) record(c codec.UpstreamConnect) {
	at := c.Start.Add(c.DNS + c.TCP + c.TLS)
	shared.Taking("upstream.mu")
	u.mu.Lock()
	defer u.mu.Unlock()
	u.st.Address = c.Upstream
	if c.Err == nil {
		u.st = State{Address: c.Upstream, State: OK, LastSuccess: at, LastFailure: u.st.LastFailure}
		return
	}
	reason := Reason(c.FailedPhase, c.Err)
	u.st.State, u.st.Reason, u.st.Words, u.st.Phase = Failing, reason, reasonWords[reason], c.FailedPhase
	u.st.Error = codec.Text([]byte(c.Err.Error())) // a DNS name or a certificate field may not be UTF-8
	u.st.FailedAttempts++
	u.st.LastFailure = at
}

// State returns the latest state; nil-safe (a nil record is unknown).
func (u *Health) State() State {
	if u == nil {
		return State{State: Unknown}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}

// Summary is the state in one line, for the status and the log.
func (s State) Summary() string {
	name := "upstream"
	if s.Address != "" {
		name += " " + s.Address
	}
	switch s.State {
	case Failing:
		var b strings.Builder
		b.WriteString(name + " FAILING: ")
		if s.Words != "" {
			b.WriteString(s.Words)
		} else {
			b.WriteString(s.Reason)
		}
		b.WriteString("; " + plural(s.FailedAttempts, "attempt") + " failed since the last success")
		return b.String()
	case OK:
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

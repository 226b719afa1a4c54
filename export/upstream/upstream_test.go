package upstream_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestUpstreamReason(t *testing.T) {
	leakcheck.Check(t)
	for _, tc := range []struct {
		phase string
		err   error
		want  string
	}{
		{"tls", fmt.Errorf("tls: failed to verify certificate: %w", x509.CertificateInvalidError{Reason: x509.Expired}), upstream.ReasonCertificateExpired},
		{"tls", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), upstream.ReasonUnknownAuthority},
		{"tls", fmt.Errorf("tls: %w", x509.HostnameError{Host: "x"}), upstream.ReasonWrongName},
		{"tls", x509.CertificateInvalidError{Reason: x509.NotAuthorizedToSign}, upstream.ReasonTLS},
		{"tls", errors.New("tls: first record does not look like a TLS handshake"), upstream.ReasonTLS},
		{"dns", fmt.Errorf("resolving istiod: %w", &net.DNSError{Err: "no such host", Name: "istiod", IsNotFound: true}), upstream.ReasonDNS},
		{"dns", &net.DNSError{Err: "i/o timeout", Name: "istiod", IsTimeout: true}, upstream.ReasonTimeout},
		{"tcp", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, upstream.ReasonRefused},
		{"tcp", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, upstream.ReasonTimeout},
		{"tls", context.DeadlineExceeded, upstream.ReasonTimeout},
		{"tcp", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}, upstream.ReasonTCP},
	} {
		if got := upstream.Reason(tc.phase, tc.err); got != tc.want {
			t.Errorf("UpstreamReason(%s, %v) = %s, want %s", tc.phase, tc.err, got, tc.want)
		}
		if upstream.ReasonWords(tc.want) == "" {
			t.Errorf("no words for %s", tc.want)
		}
	}
}

func TestUpstreamHealthCountsFailuresUntilASuccess(t *testing.T) {
	leakcheck.Check(t)
	u := upstream.New(upstream.Config{})
	if got := u.State(); got.State != upstream.Unknown {
		t.Errorf("before any attempt: %+v", got)
	}
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for i := range 3 {
		u.OnEvent(track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{Upstream: "istiod:15012", Start: start.Add(time.Duration(i) * time.Second), FailedPhase: "tcp", Err: refused}})
	}
	got := u.State()
	if got.State != upstream.Failing || got.Reason != upstream.ReasonRefused || got.FailedAttempts != 3 || got.Address != "istiod:15012" ||
		!got.LastFailure.Equal(start.Add(2*time.Second)) || !got.LastSuccess.IsZero() || got.Error != refused.Error() {
		t.Errorf("after three refusals: %+v", got)
	}
	u.OnEvent(track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{Upstream: "istiod:15012", Start: start.Add(5 * time.Second), TCP: time.Millisecond}})
	got = u.State()
	if got.State != upstream.OK || got.FailedAttempts != 0 || got.Reason != "" || !got.LastSuccess.Equal(start.Add(5*time.Second+time.Millisecond)) ||
		!got.LastFailure.Equal(start.Add(2*time.Second)) {
		t.Errorf("after a success: %+v", got)
	}
}

package redact

import (
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestIsFingerprintIsExactlyWhatFingerprintWrites(t *testing.T) {
	leakcheck.Check(t)
	fp := Fingerprint([]byte("-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----"))
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{fp, true},
		{Fingerprint(nil), true},
		{fp + "-----BEGIN PRIVATE KEY-----", false},
		{"key " + fp, false},
		{fp[:len(fp)-1], false},
		{Marker + "sha256 zz, 3 bytes]", false},
		{"", false},
	} {
		if got := isFingerprint([]byte(tc.in)); got != tc.want {
			t.Errorf("isFingerprint(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

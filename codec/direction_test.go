package codec_test

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestDirection(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		s      string
		want   codec.Direction
		wantOK bool
	}{
		{"request", codec.DirectionRequest, true},
		{"response", codec.DirectionResponse, true},
		{"unknown", 0, false},
		{"Request", 0, false},
		{"", 0, false},
	} {
		got, ok := codec.ParseDirection(tt.s)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseDirection(%q) = %v, %v; want %v, %v", tt.s, got, ok, tt.want, tt.wantOK)
		}
		if ok && got.String() != tt.s {
			t.Errorf("ParseDirection(%q).String() = %q", tt.s, got.String())
		}
	}
	if got := codec.Direction(0).String(); got != "unknown" {
		t.Errorf("Direction(0).String() = %q, want unknown", got)
	}
}

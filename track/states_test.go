package track_test

import (
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestStateWords(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		state       track.State
		wantDisplay string
	}{
		{track.StateSynced, "SYNCED"},
		{track.StateStale, "STALE"},
		{track.StateNACKed, "ERROR"},
		{track.StateNotSent, "NOT SENT"},
	}
	if len(tests) != len(track.States) {
		t.Fatalf("%d states tested, track.States has %d", len(tests), len(track.States))
	}
	for i, tt := range tests {
		if track.States[i] != tt.state {
			t.Errorf("States[%d] = %s, want %s", i, track.States[i], tt.state)
		}
		if got := tt.state.Display(); got != tt.wantDisplay {
			t.Errorf("%s.Display() = %q, want %q", tt.state, got, tt.wantDisplay)
		}
	}
}

func TestParseState(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		in     string
		want   track.State
		wantOK bool
	}{
		{"SYNCED", track.StateSynced, true},
		{"stale", track.StateStale, true},
		{"NACKED", track.StateNACKed, true},
		{"error", track.StateNACKed, true},
		{"NOT_SENT", track.StateNotSent, true},
		{"not sent", track.StateNotSent, true},
		{"", "", false},
		{"ACKED", "", false},
		{"NOT-SENT", "", false},
	}
	for _, tt := range tests {
		if got, ok := track.ParseState(tt.in); got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseState(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

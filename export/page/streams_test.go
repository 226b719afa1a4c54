package page_test

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestStreamFilter(t *testing.T) {
	leakcheck.Check(t)
	streams := func() []track.StreamState {
		return []track.StreamState{
			{ID: 1, NodeID: "a", Types: map[string]*track.TypeState{
				codec.TypeCluster: {State: "NACKED"}, codec.TypeEndpoint: {State: "SYNCED"},
			}},
			{ID: 2, NodeID: "b", Types: map[string]*track.TypeState{
				codec.TypeCluster: {State: "SYNCED"}, codec.TypeListener: {State: "STALE"},
			}},
		}
	}
	// kept lists, per stream, its types left (short names, sorted).
	kept := func(ss []track.StreamState) map[uint64][]string {
		out := map[uint64][]string{}
		for _, s := range ss {
			for url := range s.Types {
				out[s.ID] = append(out[s.ID], codec.ShortType(url))
			}
			slices.Sort(out[s.ID])
		}
		return out
	}
	for _, tc := range []struct {
		query   string
		want    map[uint64][]string
		wantErr string
	}{
		{"", map[uint64][]string{1: {"cds", "eds"}, 2: {"cds", "lds"}}, ""},
		{"type=cds", map[uint64][]string{1: {"cds"}, 2: {"cds"}}, ""},
		{"type=" + url.QueryEscape(codec.TypeListener), map[uint64][]string{2: {"lds"}}, ""},
		{"state=nacked", map[uint64][]string{1: {"cds"}}, ""},
		{"type=cds&state=SYNCED", map[uint64][]string{2: {"cds"}}, ""},
		{"type=rds", map[uint64][]string{}, ""},
		{"state=ERROR", map[uint64][]string{1: {"cds"}}, ""},
		{"state=NOT+SENT", map[uint64][]string{}, ""},
		{"state=broken", nil, `state "broken": want one of SYNCED, STALE, NACKED, NOT_SENT`},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			f, err := page.ParseStreamFilter(q)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, kept(f.Apply(streams()))); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDebugDocListsTheStates: docs/debug.md's row of /debug/streams lists
// the states ?state= takes, as track.State says them and in their display
// words, and nothing else.
func TestDebugDocListsTheStates(t *testing.T) {
	leakcheck.Check(t)
	const doc = "../../docs/debug.md"
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `/debug/streams` \\|.*$").FindString(string(raw))
	if row == "" {
		t.Fatalf("%s has no row for /debug/streams", doc)
	}
	var listed []string
	for _, m := range regexp.MustCompile("`([A-Z][A-Z_ ]*)`").FindAllStringSubmatch(row, -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for _, s := range track.States {
		want = append(want, string(s))
		if d := s.Display(); d != string(s) && !strings.Contains(d, " ") {
			want = append(want, d) // NOT SENT would need quoting in a URL: the doc leaves it out
		}
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("%s lists the states of ?state= as %v, want %v", doc, listed, want)
	}
}

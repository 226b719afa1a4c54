package track_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

// The tracker finds a push's resources by walking the acknowledged state in
// the order of the previous push, and by an index of name hashes when a
// resource is not where the walk expects it. These tests move, add and drop
// resources between pushes and check the diffs, and the state each push
// leaves (through the diff of the push after it); with real hashes, and with
// every name hashing alike, so that the index must tell colliding names
// apart by the names themselves.

// orderNames are more than a nameSet searches without an index, all of one
// length, so that CollideNames gives them all one key.
var orderNames = []string{"c00", "c01", "c02", "c03", "c04", "c05", "c06", "c07", "c08", "c09", "c10", "c11"}

// spec turns names into resources: "~c03" is c03 with another body.
func spec(names []string, body, changed func(string) proto.Message) []proto.Message {
	var out []proto.Message
	for _, n := range names {
		if rest, ok := strings.CutPrefix(n, "~"); ok {
			out = append(out, changed(rest))
		} else {
			out = append(out, body(n))
		}
	}
	return out
}

func with(names []string, edit func([]string) []string) []string { return edit(slices.Clone(names)) }

func reversed(names []string) []string {
	return with(names, func(s []string) []string { slices.Reverse(s); return s })
}

func changedAt(names []string, at ...int) []string {
	return with(names, func(s []string) []string {
		for _, i := range at {
			s[i] = "~" + s[i]
		}
		return s
	})
}

// pushLines plays the actions and returns the description of every push.
func pushLines(t *testing.T, tr *track.Tracker, actions []action) []string {
	t.Helper()
	var got []string
	for i, do := range actions {
		for _, e := range do(t, tr, t0.Add(time.Duration(i)*ms)) {
			if e, ok := e.(track.PushSent); ok {
				got = append(got, describePush(e.Push))
			}
		}
	}
	return got
}

// keyings runs a test with real name hashes and with colliding ones.
func keyings(t *testing.T, test func(t *testing.T)) {
	t.Run("xxhash", test)
	t.Run("collide", func(t *testing.T) {
		defer track.CollideNames()()
		test(t)
	})
}

func TestPushOrderSotWCDS(t *testing.T) {
	leakcheck.Check(t)
	all := "+[" + strings.Join(orderNames, " ") + "]"
	gone := "-[" + strings.Join(orderNames, " ") + "]"
	tests := []struct {
		name   string
		second []string
		// want describes the second push, against the first, and the third,
		// which is the first again, against what the second left.
		want []string
	}{{
		name:   "same order, same bodies",
		second: orderNames,
		want: []string{
			"1 cds v=2 res=12 +0 -0 ~0 =12 full redundant",
			"1 cds v=3 res=12 +0 -0 ~0 =12 full redundant",
		},
	}, {
		name:   "same order, two bodies changed",
		second: changedAt(orderNames, 3, 7),
		want: []string{
			"1 cds v=2 res=12 +0 -0 ~2 =10 ~[c03 c07] full",
			"1 cds v=3 res=12 +0 -0 ~2 =10 ~[c03 c07] full",
		},
	}, {
		name:   "reversed",
		second: reversed(orderNames),
		want: []string{
			"1 cds v=2 res=12 +0 -0 ~0 =12 full redundant",
			"1 cds v=3 res=12 +0 -0 ~0 =12 full redundant",
		},
	}, {
		name:   "two swapped, one of them changed",
		second: with(orderNames, func(s []string) []string { s[4], s[5] = "~"+s[5], s[4]; return s }),
		want: []string{
			"1 cds v=2 res=12 +0 -0 ~1 =11 ~[c05] full",
			"1 cds v=3 res=12 +0 -0 ~1 =11 ~[c05] full",
		},
	}, {
		name: "inserted first, in the middle and last",
		second: with(orderNames, func(s []string) []string {
			return append(slices.Concat([]string{"n00"}, s[:6], []string{"n01"}, s[6:]), "n02")
		}),
		want: []string{
			"1 cds v=2 res=15 +3 -0 ~0 =12 +[n00 n01 n02] full",
			"1 cds v=3 res=12 +0 -3 ~0 =12 -[n00 n01 n02] full",
		},
	}, {
		name:   "removed first, in the middle and last",
		second: slices.Concat(orderNames[1:6], orderNames[7:11]),
		want: []string{
			"1 cds v=2 res=9 +0 -3 ~0 =9 -[c00 c06 c11] full",
			"1 cds v=3 res=12 +3 -0 ~0 =9 +[c00 c06 c11] full",
		},
	}, {
		name:   "inserted, removed and changed at once",
		second: slices.Concat([]string{"c00", "n00", "c01", "~c02"}, orderNames[4:]),
		want: []string{
			"1 cds v=2 res=12 +1 -1 ~1 =10 +[n00] -[c03] ~[c02] full",
			"1 cds v=3 res=12 +1 -1 ~1 =10 +[c03] -[n00] ~[c02] full",
		},
	}, {
		// The first mention counts in the diff, the last body is kept.
		name:   "a name twice",
		second: append(slices.Clone(orderNames), "~c02"),
		want: []string{
			"1 cds v=2 res=13 +0 -0 ~0 =12 full redundant",
			"1 cds v=3 res=12 +0 -0 ~1 =11 ~[c02] full",
		},
	}, {
		name:   "a new name twice",
		second: slices.Concat([]string{"n00"}, orderNames, []string{"n00"}),
		want: []string{
			"1 cds v=2 res=14 +2 -0 ~0 =12 +[n00 n00] full",
			"1 cds v=3 res=12 +0 -1 ~0 =12 -[n00] full",
		},
	}, {
		name:   "every name new",
		second: []string{"n00", "n01", "n02", "n03", "n04", "n05"},
		want: []string{
			"1 cds v=2 res=6 +6 -12 ~0 =0 +[n00 n01 n02 n03 n04 n05] " + gone + " full",
			"1 cds v=3 res=12 +12 -6 ~0 =0 " + all + " -[n00 n01 n02 n03 n04 n05] full",
		},
	}, {
		name:   "empty",
		second: nil,
		want: []string{
			"1 cds v=2 res=0 +0 -12 ~0 =0 " + gone,
			"1 cds v=3 res=12 +12 -0 ~0 =0 " + all + " full",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyings(t, func(t *testing.T) {
				body := func(names []string) []proto.Message { return spec(names, cluster, clusterV2) }
				got := pushLines(t, track.New(track.Config{}), []action{
					open(1, adsSotW),
					frame(1, initial(cds)),
					frame(1, push(cds, 1, body(orderNames)...)),
					frame(1, ack(cds, 1)),
					frame(1, push(cds, 2, body(tt.second)...)),
					frame(1, ack(cds, 2)),
					frame(1, push(cds, 3, body(orderNames)...)),
				})
				want := append([]string{"1 cds v=1 res=12 +12 -0 ~0 =0 " + all + " full initial"}, tt.want...)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("pushes (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// SotW EDS: the subscription is in an order of its own, and a name a push
// leaves out is kept.
func TestPushOrderSotWEDS(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name   string
		second []string
		want   []string
	}{{
		name:   "a few, in another order, one changed",
		second: []string{"c05", "~c03", "c01"},
		want: []string{
			"1 eds v=2 res=3 +0 -0 ~1 =2 ~[c03]",
			"1 eds v=3 res=12 +0 -0 ~1 =11 ~[c03] full",
		},
	}, {
		name:   "every name, reversed",
		second: reversed(orderNames),
		want: []string{
			"1 eds v=2 res=12 +0 -0 ~0 =12 full redundant",
			"1 eds v=3 res=12 +0 -0 ~0 =12 full redundant",
		},
	}, {
		// The client keeps only what it subscribed to.
		name:   "a name not subscribed",
		second: []string{"c00", "x99"},
		want: []string{
			"1 eds v=2 res=2 +1 -0 ~0 =1 +[x99]",
			"1 eds v=3 res=12 +0 -0 ~0 =12 full redundant",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyings(t, func(t *testing.T) {
				ep := func(name string) proto.Message { return endpoint(name, "10.0.0.1") }
				epV2 := func(name string) proto.Message { return endpoint(name, "10.0.0.2") }
				body := func(names []string) []proto.Message { return spec(names, ep, epV2) }
				sub := reversed(orderNames)
				got := pushLines(t, track.New(track.Config{}), []action{
					open(1, adsSotW),
					frame(1, initial(eds, sub...)),
					frame(1, push(eds, 1, body(orderNames)...)),
					frame(1, ack(eds, 1, sub...)),
					frame(1, push(eds, 2, body(tt.second)...)),
					frame(1, ack(eds, 2, sub...)),
					frame(1, push(eds, 3, body(orderNames)...)),
				})
				want := append([]string{"1 eds v=1 res=12 +12 -0 ~0 =0 +[" + strings.Join(orderNames, " ") + "] full initial"}, tt.want...)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("pushes (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// Delta: removals take names out of the middle of the state.
func TestPushOrderDelta(t *testing.T) {
	leakcheck.Check(t)
	keyings(t, func(t *testing.T) {
		body := func(names []string) []proto.Message { return spec(names, cluster, clusterV2) }
		got := pushLines(t, track.New(track.Config{}), []action{
			open(1, adsDelta),
			frame(1, dinitial(cds)),
			frame(1, dpush(cds, 1, nil, body(orderNames)...)),
			frame(1, dack(cds, 1)),
			frame(1, dpush(cds, 2, []string{"c00", "c05", "c11", "never-sent"}, body([]string{"~c03", "n00"})...)),
			frame(1, dack(cds, 2)),
			frame(1, dpush(cds, 3, nil, body(orderNames)...)),
			frame(1, dack(cds, 3)),
			frame(1, dpush(cds, 4, []string{"n00"}, body(orderNames)...)),
		})
		want := []string{
			"1 cds v=1 res=12 +12 -0 ~0 =0 +[" + strings.Join(orderNames, " ") + "] full initial",
			"1 cds v=2 res=2 +1 -3 ~1 =0 +[n00] -[c00 c05 c11] ~[c03]",
			// n00 is untouched: not a full push.
			"1 cds v=3 res=12 +3 -0 ~1 =8 +[c00 c05 c11] ~[c03]",
			"1 cds v=4 res=12 +0 -1 ~0 =12 -[n00] full",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("pushes (-want +got):\n%s", diff)
		}
	})
}

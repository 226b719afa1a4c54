package inspect

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/internal/testutil/inspecttest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
	"sync/atomic"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const aggregated = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// detect keeps the repeated-full-sync detector out of the counts: every CDS
// push is a full one, and whether two of them fall into one 2s round
// depends on how fast the machine runs the scenario.
var detect = track.Config{RepeatedFullSyncLimit: 1000}

func record(t *testing.T, opts inspecttest.Options) *inspecttest.Scenario {
	t.Helper()
	return inspecttest.Record(t, filepath.Join(t.TempDir(), "capture.jsonl"), opts)
}

// scriptSummary is what inspecttest.Record's script must come to.
func scriptSummary() []*streamSummary {
	return []*streamSummary{{
		ID: 1, Node: inspecttest.CDSNode, Method: aggregated, Protocol: "sotw", CloseCode: "Canceled", CloseMessage: "context canceled",
		FullSyncTypes: []string{"CDS"},
		Types: []*typeSummary{{
			TypeURL: resource.ClusterType, Type: "CDS", Pushes: 6, ACKs: 3, NACKs: inspecttest.NACKs,
			FullInitial: 1, FullRepeated: 5, Loops: 1, LastVersion: "v4", LastResult: "ack",
		}},
	}, {
		ID: 2, Node: inspecttest.SDSNode, Method: aggregated, Protocol: "sotw", CloseCode: "Canceled", CloseMessage: "context canceled",
		FullSyncTypes: []string{"SDS"},
		Types: []*typeSummary{{
			TypeURL: resource.SecretType, Type: "SDS", Pushes: 1, ACKs: 1, FullInitial: 1, LastVersion: "v1", LastResult: "ack",
		}},
	}}
}

var summaryOpts = cmp.Options{
	cmpopts.IgnoreFields(streamSummary{}, "Conn", "Peer", "Opened", "Closed", "FullSync"),
	cmpopts.IgnoreFields(typeSummary{}, "ACKLatency"),
}

func checkSummary(t *testing.T, got *summary) {
	t.Helper()
	if diff := cmp.Diff(scriptSummary(), got.Streams, summaryOpts); diff != "" {
		t.Errorf("summary differs from the script (-want +got):\n%s", diff)
	}
	for _, s := range got.Streams {
		if s.FullSync == nil || *s.FullSync <= 0 || *s.FullSync > s.Closed.Sub(s.Opened) {
			t.Errorf("stream %d: time to full sync %v, want within the stream's life %v", s.ID, s.FullSync, s.Closed.Sub(s.Opened))
		}
		for _, ty := range s.Types {
			l := ty.ACKLatency
			if l.N != ty.ACKs || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 {
				t.Errorf("stream %d %s: ACK latency %+v, want %d samples with 0 < p50 <= p90 <= p99", s.ID, ty.Type, l, ty.ACKs)
			}
		}
	}
	wantEpisodes := []episode{{Detector: track.DetectorNACKLoop, Key: "stream 1 cds", Count: inspecttest.NACKs,
		Detail: "the same cds content (5 resources) NACKed 3 times in a row on stream 1"}}
	if diff := cmp.Diff(wantEpisodes, got.Episodes, cmpopts.IgnoreFields(episode{}, "Started", "Ended", "Duration")); diff != "" {
		t.Errorf("detector episodes (-want +got):\n%s", diff)
	}
}

func TestSummaryCountsMatchTheScript(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	got, err := summarize(t.Context(), []string{sc.Path}, detect, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, got)
	if len(got.Files) != 1 || got.Files[0].Truncated || got.Files[0].Header.Adstap != "inspecttest" {
		t.Errorf("files read: %+v", got.Files)
	}
}

// TestRotatedCaptureReadsAsOne: a capture rotated every few records (each
// new file repeating the open streams at its top) replays to the same
// counts, from its newest file's path alone or from the files listed.
func TestRotatedCaptureReadsAsOne(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{MaxBytes: 1500, MaxFiles: 100})
	files := capture.Files(sc.Path, 100)
	if len(files) < 3 {
		t.Fatalf("the capture rotated into %d files, want several", len(files))
	}
	for name, args := range map[string][]string{"newest path": {sc.Path}, "files listed": files} {
		t.Run(name, func(t *testing.T) {
			got, err := summarize(t.Context(), args, detect, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkSummary(t, got)
			if t.Failed() {
				for _, f := range files {
					for _, r := range readRecords(t, f) {
						t.Logf("%s: %s %s stream %d reopened=%v %s", filepath.Base(f), r.Time.Format(time.StampMicro), r.Kind, r.Stream, r.Reopened, r.Direction)
					}
				}
			}
			if len(got.Files) != len(files) {
				t.Errorf("read %d files, want %d", len(got.Files), len(files))
			}
			out, _ := run(t, Config{Files: args, Timeline: true, Detect: detect})
			for _, line := range []string{"stream 1 open", "stream 2 open", "stream 1 closed", "stream 2 closed"} {
				if n := strings.Count(out, line); n != 1 {
					t.Errorf("%q appears %d times in the timeline, want once:\n%s", line, n, out)
				}
			}
			if strings.Contains(out, "no end for this stream") {
				t.Errorf("a stream repeated at the top of a rotated file was taken for a lost one:\n%s", out)
			}
		})
	}

	// Without its oldest files (deleted by rotation), the capture starts
	// with stream 1 repeated at the top of a file: it is replayed from
	// there, marked as begun before the files.
	t.Run("oldest files gone", func(t *testing.T) {
		repeatedAtTop := func(f string) map[uint64]bool {
			m := map[uint64]bool{}
			for _, r := range readRecords(t, f)[1:] {
				if r.Kind != capture.KindOpen || !r.Reopened {
					break
				}
				m[r.Stream] = true
			}
			return m
		}
		from := slices.IndexFunc(files, func(f string) bool { return repeatedAtTop(f)[1] })
		if from < 0 {
			t.Fatal("no file starts with stream 1 repeated")
		}
		got, err := summarize(t.Context(), files[from:], detect, nil)
		if err != nil {
			t.Fatal(err)
		}
		partial := map[uint64]bool{}
		for _, s := range got.Streams {
			partial[s.ID] = s.Partial
			if s.Closed.IsZero() {
				t.Errorf("stream %d not closed", s.ID)
			}
		}
		if diff := cmp.Diff(map[uint64]bool{1: true, 2: repeatedAtTop(files[from])[2]}, partial); diff != "" {
			t.Errorf("streams begun before the files (-want +got):\n%s", diff)
		}
		out, _ := run(t, Config{Files: files[from:], Timeline: true, Detect: detect})
		if !strings.Contains(out, "WARN  stream 1 began before the first file read") || strings.Count(out, "stream 1 open") != 1 {
			t.Errorf("timeline:\n%s", out)
		}
	})
}

func run(t *testing.T, cfg Config) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errOut
	if err := Run(t.Context(), cfg); err != nil {
		t.Fatalf("Run: %v (stderr: %s)", err, errOut.String())
	}
	return out.String(), errOut.String()
}

// shifted copies a capture with every recorded time moved by d, the way a
// capture from another day reads.
func shifted(t *testing.T, src string, d time.Duration) (string, []capture.Record) {
	t.Helper()
	recs := readRecords(t, src)
	dst := filepath.Join(t.TempDir(), "shifted.jsonl")
	var b bytes.Buffer
	for i := range recs {
		recs[i].Time = recs[i].Time.Add(d)
		line, err := json.Marshal(recs[i])
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(dst, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst, recs
}

// splitRecords cuts a capture file into the bytes of its records: a line,
// and after the line of a frame its message and a newline.
func splitRecords(t *testing.T, data []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var line struct{ Len int }
		if i < 0 || json.Unmarshal(data[:i], &line) != nil {
			t.Fatalf("no record at %q", data[:min(len(data), 80)])
		}
		n := i + 1
		if line.Len > 0 {
			n += line.Len + 1
		}
		out, data = append(out, data[:n]), data[n:]
	}
	return out
}

// decodeRecord reads the record in b.
func decodeRecord(b []byte) capture.Record {
	r, _ := capture.NewReader(bytes.NewReader(b), "record").Next()
	return r
}

func readRecords(t *testing.T, path string) []capture.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []capture.Record
	rd := capture.NewReader(f, path)
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		recs = append(recs, r)
	}
}

// TestTimelineIsTheLiveLogAtTheRecordedTimes: the timeline has the live
// log's lines, each stamped with the time recorded in the capture — here a
// day and a few hours before the test ran, so time.Now() would show.
func TestTimelineIsTheLiveLogAtTheRecordedTimes(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	path, recs := shifted(t, sc.Path, -(26*time.Hour + 17*time.Minute))
	out, _ := run(t, Config{Files: []string{path}, Timeline: true, Detect: detect})

	var open1, close2 capture.Record
	for _, r := range recs {
		switch {
		case r.Kind == capture.KindOpen && r.Stream == 1:
			open1 = r
		case r.Kind == capture.KindClose && r.Stream == 2:
			close2 = r
		}
	}
	want := []string{
		"--- " + open1.Time.Format("2006-01-02 Monday"),
		clockTime(open1.Time) + " INFO  stream 1 open: sotw StreamAggregatedResources from " + open1.Peer,
		"INFO  CDS v=v1 +3 -0 ~0 =0 ",
		"INFO  CDS v=v2 +1 -0 ~1 =2 ",
		"WARN  CDS v=v3 +1 -0 ~0 =4 ",
		"WARN  NACK loop started: the same cds content (5 resources) NACKed 3 times in a row on stream 1",
		"INFO  NACK loop ended: stream 1 cds",
		"INFO  CDS v=v4 +1 -0 ~0 =4 ",
		"INFO  SDS v=v1 +1 -0 ~0 =0 ",
		"full sync complete in",
		clockTime(close2.Time) + " INFO  stream 2 closed after ",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the timeline lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(out, "NACK") || !strings.Contains(out, inspecttest.NACKMessage) {
		t.Errorf("the timeline lacks the NACK with the client's message:\n%s", out)
	}
	// Every line is stamped with a recorded time, none with the time of
	// reading. The records of different streams reach the file in the
	// order the recorder took them, not always that of their times (a
	// loaded machine shows it): the span is their earliest to their latest.
	first, last := recs[0].Time, recs[0].Time
	for _, r := range recs {
		if r.Time.Before(first) {
			first = r.Time
		}
		if r.Time.After(last) {
			last = r.Time
		}
	}
	if first.Format(time.DateOnly) != last.Format(time.DateOnly) {
		t.Skip("the scenario ran across midnight") // time-of-day stamps do not compare then
	}
	stampRE := regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d\d\d) `)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "---") {
			continue
		}
		m := stampRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("a timeline line without a time: %q", line)
			continue
		}
		if m[1] < clockTime(first) || m[1] > clockTime(last) {
			t.Errorf("line stamped %s, outside the recorded %s..%s: %q", m[1], clockTime(first), clockTime(last), line)
		}
	}
}

func replayWith(t *testing.T, files []string, c consumer) {
	t.Helper()
	rd := &reader{rp: newReplayer(detect, c), stderr: &bytes.Buffer{}, poll: defaultPoll}
	srcs, err := openFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(srcs)
	for _, src := range srcs {
		if err := rd.readFile(t.Context(), src); err != nil {
			t.Fatal(err)
		}
	}
}

var pushOpts = cmpopts.IgnoreFields(pushDiff{}, "At", "Nonce", "Bytes", "Latency", "Details", "PushID", "FullPush", "Requested")

func TestPushShowsEveryNameAddedRemovedAndChanged(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	tests := []struct {
		version string
		want    []*pushDiff
	}{
		{"v2", []*pushDiff{{
			Stream: 1, Node: inspecttest.CDSNode, TypeURL: resource.ClusterType, Type: "CDS", Version: "v2", Resources: 4,
			Added: []string{inspecttest.Ratings}, Changed: []string{inspecttest.Reviews}, Unchanged: 2, FullSync: true, Result: "ack",
		}}},
		// Each of the three v3 pushes is against v2, the last version accepted.
		{"v3", slices.Repeat([]*pushDiff{{
			Stream: 1, Node: inspecttest.CDSNode, TypeURL: resource.ClusterType, Type: "CDS", Version: "v3", Resources: 5,
			Added: []string{inspecttest.Canary}, Unchanged: 4, FullSync: true, Result: "nack", Error: inspecttest.NACKMessage,
		}}, inspecttest.NACKs)},
		{"v4", []*pushDiff{{
			Stream: 1, Node: inspecttest.CDSNode, TypeURL: resource.ClusterType, Type: "CDS", Version: "v4", Resources: 5,
			Added: []string{inspecttest.Canary}, Unchanged: 4, FullSync: true, Result: "ack",
		}}},
		{"v1", []*pushDiff{{
			Stream: 1, Node: inspecttest.CDSNode, TypeURL: resource.ClusterType, Type: "CDS", Version: "v1", Resources: 3,
			Added: []string{inspecttest.Details, inspecttest.Productpage, inspecttest.Reviews}, FullSync: true, Result: "ack",
		}, {
			Stream: 2, Node: inspecttest.SDSNode, TypeURL: resource.SecretType, Type: "SDS", Version: "v1", Resources: 1,
			Added: []string{inspecttest.SecretName}, FullSync: true, Result: "ack",
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			p := newPushes(tt.version, false)
			replayWith(t, []string{sc.Path}, p)
			sortNames := cmpopts.SortSlices(func(a, b string) bool { return a < b })
			if diff := cmp.Diff(tt.want, p.result(), pushOpts, sortNames); diff != "" {
				t.Errorf("pushes of %s (-want +got):\n%s", tt.version, diff)
			}
		})
	}

	out, _ := run(t, Config{Files: []string{sc.Path}, Push: "v2"})
	for _, w := range []string{"version v2: 1 push on 1 stream", "+1 -0 ~1 =2", "  + " + inspecttest.Ratings + "\n", "  ~ " + inspecttest.Reviews + "\n", "ACK"} {
		if !strings.Contains(out, w) {
			t.Errorf("--push v2 lacks %q:\n%s", w, out)
		}
	}
	out, _ = run(t, Config{Files: []string{sc.Path}, Push: "v9"})
	if want := "no push of version \"v9\""; !strings.Contains(out, want) || !strings.Contains(out, "versions pushed: v1, v2, v3, v4") {
		t.Errorf("--push of a version never pushed: %q", out)
	}
}

// TestPushResourcesShowTheFieldLevelChange: with --resources, the changed
// cluster shows the one field that changed since the version the client
// accepted, and every resource as JSON.
func TestPushResourcesShowTheFieldLevelChange(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	p := newPushes("v2", true)
	replayWith(t, []string{sc.Path}, p)
	if len(p.result()) != 1 {
		t.Fatalf("%d pushes of v2, want 1", len(p.found))
	}
	byName := map[string]resourceDetail{}
	for _, d := range p.found[0].Details {
		byName[d.Name] = d
	}
	want := map[string]resourceDetail{
		inspecttest.Reviews: {Name: inspecttest.Reviews, Status: "changed", TypeURL: resource.ClusterType,
			Changes: []fieldChange{{Path: "connect_timeout", Old: `"5s"`, New: `"7s"`}}},
		inspecttest.Ratings:     {Name: inspecttest.Ratings, Status: "added", TypeURL: resource.ClusterType},
		inspecttest.Details:     {Name: inspecttest.Details, Status: "unchanged", TypeURL: resource.ClusterType},
		inspecttest.Productpage: {Name: inspecttest.Productpage, Status: "unchanged", TypeURL: resource.ClusterType},
	}
	if diff := cmp.Diff(want, byName, cmpopts.IgnoreFields(resourceDetail{}, "JSON")); diff != "" {
		t.Errorf("v2's resources (-want +got):\n%s", diff)
	}
	if j := byName[inspecttest.Reviews].JSON; !strings.Contains(j, `"name": "`+inspecttest.Reviews+`"`) || !strings.Contains(j, `"connect_timeout": "7s"`) {
		t.Errorf("the changed cluster's JSON:\n%s", j)
	}

	// v4 is compared with v2, not with the rejected v3: the canary is new.
	p4 := newPushes("v4", true)
	replayWith(t, []string{sc.Path}, p4)
	for _, d := range p4.found[0].Details {
		if wantStatus := map[bool]string{true: "added", false: "unchanged"}[d.Name == inspecttest.Canary]; d.Status != wantStatus || d.Changes != nil {
			t.Errorf("v4 %s: %s with %d changes, want %s", d.Name, d.Status, len(d.Changes), wantStatus)
		}
	}

	out, _ := run(t, Config{Files: []string{sc.Path}, Push: "v2", Resources: true})
	for _, w := range []string{
		"  ~ " + inspecttest.Reviews + "  (changed, envoy.config.cluster.v3.Cluster)\n      ~ connect_timeout: \"5s\" → \"7s\"\n",
		"  + " + inspecttest.Ratings + "  (added, envoy.config.cluster.v3.Cluster)",
		`"connect_timeout": "7s"`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("--push v2 --resources lacks %q:\n%s", w, out)
		}
	}
}

func TestNACKsCollapseIntoOneEntryWithACount(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	c := newNACKCollector()
	replayWith(t, []string{sc.Path}, c)
	want := []*nackGroup{{
		Stream: 1, Node: inspecttest.CDSNode, TypeURL: resource.ClusterType, Type: "CDS", Message: inspecttest.NACKMessage, Code: 3,
		Versions: []string{"v3"}, Resources: []string{inspecttest.Canary}, Count: inspecttest.NACKs,
		// The capture holds the rejected push: its cluster names the
		// DestinationRule it came from, as istiod stamps it.
		Objects: []origin.Object{{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule", Namespace: "default", Name: inspecttest.CanaryRule,
			Path: "/apis/networking.istio.io/v1/namespaces/default/destination-rule/" + inspecttest.CanaryRule}},
		Source: "from DestinationRule default/" + inspecttest.CanaryRule,
	}}
	if diff := cmp.Diff(want, c.result(), cmpopts.IgnoreFields(nackGroup{}, "First", "Last")); diff != "" {
		t.Errorf("NACKs (-want +got):\n%s", diff)
	}
	if len(c.groups) == 1 && !c.groups[0].First.Before(c.groups[0].Last) {
		t.Errorf("first NACK at %v, last at %v", c.groups[0].First, c.groups[0].Last)
	}

	out, _ := run(t, Config{Files: []string{sc.Path}, NACKs: true})
	if n := strings.Count(out, inspecttest.NACKMessage); n != 1 {
		t.Errorf("the message appears %d times, want once:\n%s", n, out)
	}
	for _, w := range []string{"3 NACKs, 1 distinct", "×3  stream 1  CDS  node=" + inspecttest.CDSNode, "rejected version: v3", "resources named: " + inspecttest.Canary, "code InvalidArgument",
		"source: from DestinationRule default/" + inspecttest.CanaryRule, "kubectl get destinationrule -n default " + inspecttest.CanaryRule} {
		if !strings.Contains(out, w) {
			t.Errorf("--nacks lacks %q:\n%s", w, out)
		}
	}
}

// keyNeedles are the forms in which the private key could show up: any
// 32-byte window of its PEM body (with or without line breaks) or of its
// DER bytes, and any 32 characters of their base64 encoding at each of the
// three alignments (protojson shows bytes fields in base64; a capture's msg
// field is base64 too) — less the windows the certificate has too, since an
// EC private key's DER repeats the public key and the curve, which the
// certificate carries in the open — and the private scalar itself.
func keyNeedles(t *testing.T, keyPEM, certPEM []byte) [][]byte {
	t.Helper()
	keySources, keyDER := pemSources(t, keyPEM)
	certSources, _ := pemSources(t, certPEM)
	public := bytes.Join(certSources, []byte{0})
	var needles [][]byte
	for _, s := range keySources {
		for i := 0; i+32 <= len(s); i++ {
			if w := s[i : i+32]; !bytes.Contains(public, w) {
				needles = append(needles, w)
			}
		}
	}
	if len(needles) < 500 {
		t.Fatalf("only %d needles: the check would prove little", len(needles))
	}
	key, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		t.Fatal(err)
	}
	d, err := key.(*ecdsa.PrivateKey).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return append(needles, d, []byte(hex.EncodeToString(d)), []byte(base64.StdEncoding.EncodeToString(d)))
}

// pemSources returns a PEM block's body (with and without line breaks),
// its DER, and the base64 of the PEM text and of the DER at each alignment.
func pemSources(t *testing.T, pemBytes []byte) (sources [][]byte, der []byte) {
	t.Helper()
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("not PEM")
	}
	lines := strings.Split(strings.TrimSpace(string(pemBytes)), "\n")
	body := strings.Join(lines[1:len(lines)-1], "\n")
	sources = [][]byte{[]byte(body), []byte(strings.ReplaceAll(body, "\n", "")), block.Bytes}
	for _, raw := range [][]byte{pemBytes, block.Bytes} {
		for off := range 3 {
			enc := base64.StdEncoding.EncodeToString(raw[off:])
			sources = append(sources, []byte(enc[:len(enc)-4]))
		}
	}
	return sources, block.Bytes
}

func checkNoKey(t *testing.T, what string, hay []byte, needles [][]byte) {
	t.Helper()
	for _, n := range needles {
		if i := bytes.Index(hay, n); i >= 0 {
			t.Errorf("%s holds part of the private key at byte %d: %q", what, i, n)
			return
		}
	}
}

// TestNoByteOfThePrivateKeyLeaves: the SDS secret's real private key is in
// neither the capture file (as text, or in any decoded message) nor any of
// inspect's outputs, which show its fingerprint instead.
func TestNoByteOfThePrivateKeyLeaves(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	needles := keyNeedles(t, sc.KeyPEM, sc.CertPEM)
	// The check itself: it finds the key in each form an unredacted secret
	// would take in a capture (base64 of the message) or in inspect's JSON.
	secret := xdsconfig.Secret(inspecttest.SecretName, sc.CertPEM, sc.KeyPEM)
	wire, err := proto.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	asJSON, err := protojson.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	for what, hay := range map[string][]byte{
		"the PEM": sc.KeyPEM, "the message": wire, "the message in base64": []byte(base64.StdEncoding.EncodeToString(append([]byte("xx"), wire...))),
		"the message as JSON": asJSON,
	} {
		found := false
		for _, n := range needles {
			found = found || bytes.Contains(hay, n)
		}
		if !found {
			t.Fatalf("the check misses the key in %s", what)
		}
	}

	raw, err := os.ReadFile(sc.Path)
	if err != nil {
		t.Fatal(err)
	}
	checkNoKey(t, "the capture file", raw, needles)
	sawSecret := false
	for i, r := range readRecords(t, sc.Path) {
		checkNoKey(t, fmt.Sprintf("record %d's message", i), r.Message, needles)
		sawSecret = sawSecret || (r.Redacted && bytes.Contains(r.Message, []byte(resource.SecretType)))
	}
	if !sawSecret {
		t.Fatal("the capture has no redacted SDS response: the scenario did not push the secret")
	}

	fingerprint := redact.Fingerprint(sc.KeyPEM)
	for _, cfg := range []Config{
		{Summary: true, Timeline: true},
		{Push: "v1", Resources: true},
		{Push: "v1"},
		{NACKs: true},
	} {
		cfg.Files = []string{sc.Path}
		out, errOut := run(t, cfg)
		checkNoKey(t, fmt.Sprintf("the output of %+v", cfg), []byte(out+errOut), needles)
		if cfg.Resources && !strings.Contains(out, `"inline_string": "`+fingerprint+`"`) {
			t.Errorf("--push v1 --resources does not show the key's fingerprint %s:\n%s", fingerprint, out)
		}
	}
}

// TestTruncatedFileIsReadUpToItsLastCompleteRecord: a file cut in the
// middle of its last record is read up to the record before, with a
// warning naming it and what was read, and no error.
func TestTruncatedFileIsReadUpToItsLastCompleteRecord(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	data, err := os.ReadFile(sc.Path)
	if err != nil {
		t.Fatal(err)
	}
	lines := splitRecords(t, data)
	last := lines[len(lines)-1]
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	if err := os.WriteFile(cut, data[:len(data)-len(last)/2], 0o600); err != nil {
		t.Fatal(err)
	}

	_, errOut := run(t, Config{Files: []string{cut}, Summary: true})
	want := fmt.Sprintf("adstap inspect: warning: %s ends in an incomplete record (record %d: the writer was stopped mid-write, or the file was copied while being written); read its %d complete records\n", cut, len(lines), len(lines)-1)
	if errOut != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut, want)
	}
	got, err := summarize(t.Context(), []string{cut}, detect, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Files[0].Truncated || got.Files[0].Records != len(lines)-1 {
		t.Errorf("file read: %+v, want %d records, truncated", got.Files[0], len(lines)-1)
	}
	// The cut record was a stream's close (which stream's comes last is up
	// to the capture's queues): that stream is still open, the other closed,
	// and both kept what came before.
	cutStream := decodeRecord(last).Stream
	if r := decodeRecord(last); r.Kind != capture.KindClose {
		t.Fatalf("the capture's last record is %s of stream %d, want a close", r.Kind, r.Stream)
	}
	if len(got.Streams) != 2 {
		t.Fatalf("streams after the cut: %d, want 2", len(got.Streams))
	}
	for _, s := range got.Streams {
		if open := s.Closed.IsZero(); open != (s.ID == cutStream) {
			t.Errorf("stream %d after the cut: open %v, want open only for stream %d (whose close was cut)", s.ID, open, cutStream)
		}
		if len(s.Types) == 0 || s.Types[len(s.Types)-1].ACKs == 0 {
			t.Errorf("stream %d after the cut lost its ACKs: %+v", s.ID, s)
		}
	}
	if t.Failed() {
		for i, l := range lines {
			r := decodeRecord(l)
			t.Logf("record %d: %s %s stream %d %s", i, r.Time.Format(time.StampMicro), r.Kind, r.Stream, r.Direction)
		}
	}
}

func TestWhatIsNotACaptureIsAnInputError(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope.jsonl"), "no such file"},
		{"directory", dir, "is a directory"},
		{"empty", write("empty", ""), "is empty: not an adstap capture file"},
		{"text", write("text", "hello\nworld\n"), "not an adstap capture file: " + filepath.Join(dir, "text") + ": record at byte 0 is not valid"},
		{"no newline", write("partial", `{"kind":"capt`), "not an adstap capture file: " + filepath.Join(dir, "partial") + ": incomplete record"},
		{"a frame first", write("frame", `{"time":"2026-11-30T10:00:00Z","kind":"frame","stream":1}`+"\n"), `its first record is of kind "frame", not "capture"`},
		{"newer format", write("newer", `{"time":"2026-11-30T10:00:00Z","kind":"capture","format":99}`+"\n"), "format 99, newer than this adstap reads"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Run(t.Context(), Config{Files: []string{tt.path}, Summary: true})
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run: %v, want an InputError saying %q", err, tt.want)
			}
		})
	}
}

// waitPolls waits for --follow to look at the file three more times and
// find nothing new, so that what it did not print it will not print.
func waitPolls(t *testing.T, idlePolls func() int64) {
	t.Helper()
	from := idlePolls()
	xdstest.Eventually(t, "three more polls", func() bool { return idlePolls() >= from+3 })
}

func waitFor(t *testing.T, out *syncbuf.Buffer, want string) {
	t.Helper()
	xdstest.Eventually(t, fmt.Sprintf("%q in the output", want), func() bool { return strings.Contains(out.String(), want) })
}

// follow runs Run with Follow on path until stop is called.
func follow(t *testing.T, path string, out, errOut *syncbuf.Buffer) (stop func() error) {
	t.Helper()
	stop, _ = followPolled(t, path, out, errOut)
	return stop
}

// followPolled is follow, with the number of polls that found nothing new.
func followPolled(t *testing.T, path string, out, errOut *syncbuf.Buffer) (stop func() error, idlePolls func() int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var polls atomic.Int64
	go func() {
		done <- Run(ctx, Config{Files: []string{path}, Follow: true, Timeline: true, Summary: true, Poll: 5 * time.Millisecond,
			Detect: detect, Stdout: out, Stderr: errOut, polled: func() { polls.Add(1) }})
	}()
	idlePolls = polls.Load
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("--follow did not stop within 10s of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop, idlePolls
}

// TestFollowPrintsRecordsAppendedAfterItStarted: --follow prints the
// timeline of records written after it started, including one that
// arrives in two writes, and the summary once stopped.
func TestFollowPrintsRecordsAppendedAfterItStarted(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	data, err := os.ReadFile(sc.Path)
	if err != nil {
		t.Fatal(err)
	}
	lines := splitRecords(t, data)
	// The file starts with the records up to stream 1's first push; the
	// rest, with every close, is appended once --follow runs. The last
	// record is stream 2's close (the scenario cancels it last).
	split := slices.IndexFunc(lines, func(l []byte) bool {
		r := decodeRecord(l)
		return r.Stream == 1 && r.Direction == "response"
	}) + 1
	path := filepath.Join(t.TempDir(), "live.jsonl")
	if err := os.WriteFile(path, bytes.Join(lines[:split], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncbuf.Buffer
	stop, idlePolls := followPolled(t, path, &out, &errOut)
	waitFor(t, &out, "stream 1 open")
	waitPolls(t, idlePolls) // a few polls with nothing new
	if strings.Contains(out.String(), "closed after") || strings.Contains(out.String(), "CDS v=v1") {
		t.Fatalf("a close printed before it was written:\n%s", out.String())
	}

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rest := bytes.Join(lines[split:], nil)
	half := len(rest) - len(lines[len(lines)-1])/2 // in the middle of the last record
	if _, err := f.Write(rest[:half]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range lines {
				r := decodeRecord(l)
				t.Logf("record %d: %s stream %d %s (split %d, half %d of %d)", i, r.Kind, r.Stream, r.Direction, split, half, len(rest))
			}
			t.Logf("stderr: %s", errOut.String())
		}
	})
	waitFor(t, &out, "SDS v=v1 +1 -0 ~0 =0")
	waitFor(t, &out, "stream 1 closed")
	waitPolls(t, idlePolls) // a few polls with half a record waiting
	if strings.Contains(out.String(), "stream 2 closed") {
		t.Fatal("a half-written record was replayed")
	}
	if _, err := f.Write(rest[half:]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "stream 2 closed")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if errOut.String() != "" {
		t.Errorf("stderr: %s", errOut.String())
	}
	if !strings.Contains(out.String(), "SUMMARY") || !strings.Contains(out.String(), "NACK loop started") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestFollowAcrossRotation follows a live capture while the real tap
// writes it and rotates it every few records.
func TestFollowAcrossRotation(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	var out, errOut syncbuf.Buffer
	var stop func() error
	inspecttest.Record(t, path, inspecttest.Options{MaxBytes: 1500, MaxFiles: 100, BeforeClients: func() {
		stop = follow(t, path, &out, &errOut)
	}})
	if n := len(capture.Files(path, 100)); n < 3 {
		t.Fatalf("the capture rotated into %d files, want several", n)
	}
	waitFor(t, &out, "stream 2 closed")
	waitFor(t, &out, "stream 1 closed")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	o := out.String()
	for _, line := range []string{"stream 1 open", "stream 2 open", "CDS v=v4 +1 -0 ~0 =4", "NACK loop ended"} {
		if n := strings.Count(o, line); n != 1 {
			t.Errorf("%q appears %d times, want once:\n%s", line, n, o)
		}
	}
	if strings.Contains(o, "no end for this stream") || errOut.String() != "" {
		t.Errorf("output:\n%s\nstderr: %s", o, errOut.String())
	}
	if !regexp.MustCompile(`CDS\s+6\s+3\s+3\s`).MatchString(o) {
		t.Errorf("the summary after following does not count 6 pushes, 3 ACKs, 3 NACKs:\n%s", o)
	}
}

// TestAFormat1CaptureStillReplays reads a capture the JSON Lines writer
// (format 1, messages in base64) recorded from inspecttest's script, kept
// as it was written: captures taken before the length-delimited format
// replay to the same counts.
func TestAFormat1CaptureStillReplays(t *testing.T) {
	leakcheck.Check(t)
	const path = "testdata/format1.capture.jsonl"
	got, err := summarize(t.Context(), []string{path}, detect, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, got)
	if len(got.Files) != 1 || got.Files[0].Truncated || got.Files[0].Header.Format != 1 {
		t.Errorf("files read: %+v", got.Files)
	}
}

// TestJSONLWritesEveryRecordAsALine: --jsonl writes a capture of either
// format as JSON Lines, each message in base64 on its record's line: a
// format-1 capture comes out byte for byte as it was written, a current one
// as the records it holds.
func TestJSONLWritesEveryRecordAsALine(t *testing.T) {
	leakcheck.Check(t)
	const old = "testdata/format1.capture.jsonl"
	want, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, Config{Files: []string{old}, JSONL: true}); out != string(want) {
		t.Errorf("--jsonl of a format-1 capture differs from the file:\n%s", out)
	}

	sc := record(t, inspecttest.Options{})
	out, errOut := run(t, Config{Files: []string{sc.Path}, JSONL: true})
	var got []capture.Record
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r capture.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
		got = append(got, r)
	}
	if diff := cmp.Diff(readRecords(t, sc.Path), got); diff != "" || errOut != "" {
		t.Errorf("--jsonl (-records +lines):\n%s\nstderr: %s", diff, errOut)
	}
	if len(got) < 10 || got[0].Format != capture.FormatVersion {
		t.Errorf("%d records, the first %+v", len(got), got[0])
	}
}

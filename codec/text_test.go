package codec_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestText(t *testing.T) {
	leakcheck.Check(t)
	for _, tc := range []struct{ in, want string }{
		{"outbound|80||svc.ns.svc.cluster.local", "outbound|80||svc.ns.svc.cluster.local"},
		{"sidecar~\xff\xfe~pod", "sidecar~\uFFFD~pod"},
		{"日本", "日本"},
		{"cut \xe6\x97", "cut \uFFFD"},
		{"", ""},
	} {
		if got := codec.Text([]byte(tc.in)); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDecodedStringsAreUTF8: a peer may send strings that are not UTF-8
// (protobuf forbids it, nothing on the wire prevents it). Everything the
// decoders hand out as a string must be valid UTF-8, or Prometheus panics on
// the label and the OTLP exporter drops the batch.
func TestDecodedStringsAreUTF8(t *testing.T) {
	leakcheck.Check(t)
	const bad = "x\xff\xfe"
	node := msg(1, bad, 2, bad)
	status := msg(1, uint64(3), 2, "rejected "+bad)
	sotwReq := msg(1, bad, 2, node, 3, bad, 4, "type.googleapis.com/"+bad, 5, bad, 6, status)
	req, err := codec.DecodeRequest(sotwReq, false)
	if err != nil {
		t.Fatalf("DecodeRequest: %v", err)
	}
	got := []string{req.VersionInfo, req.Node.ID, req.Node.Cluster, req.TypeURL, req.ResponseNonce, req.ErrorDetail.Message}
	got = append(got, req.ResourceNames...)
	checkUTF8(t, "SotW request", got, 7)

	deltaReq := msg(1, node, 2, "type.googleapis.com/"+bad, 3, bad, 4, bad, 5, msg(1, bad, 2, bad), 6, bad, 7, status)
	dreq, err := codec.DecodeRequest(deltaReq, true)
	if err != nil {
		t.Fatalf("DecodeRequest(delta): %v", err)
	}
	got = []string{dreq.Node.ID, dreq.TypeURL, dreq.ResponseNonce, dreq.ErrorDetail.Message}
	got = append(got, dreq.Subscribe...)
	got = append(got, dreq.Unsubscribe...)
	for k, v := range dreq.InitialVersions {
		got = append(got, k, v)
	}
	checkUTF8(t, "Delta request", got, 8)

	cluster := msg(1, bad)
	anyCluster := msg(1, codec.TypeCluster, 2, cluster)
	resp := msg(1, bad, 2, anyCluster, 4, "type.googleapis.com/"+bad, 5, bad)
	var r codec.Response
	if err := r.Decode(resp, false); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	checkUTF8(t, "SotW response", []string{r.VersionInfo, r.TypeURL, r.Nonce}, 3)
	// The resource's name stays a view of the bytes as sent: the tracker
	// keys on them and shows them through Text.
	if diff := cmp.Diff([]byte(bad), r.Resources[0].Name); diff != "" {
		t.Errorf("resource name view (-sent +view):\n%s", diff)
	}

	deltaResp := msg(1, bad, 4, codec.TypeCluster, 5, bad, 6, bad)
	if err := r.Decode(deltaResp, true); err != nil {
		t.Fatalf("Decode(delta): %v", err)
	}
	checkUTF8(t, "Delta response", append([]string{r.VersionInfo, r.Nonce}, r.RemovedResources...), 3)
}

// checkUTF8 wants every string valid and at least n of them to show the
// replacement character (so the test fails if the bytes never got there).
func checkUTF8(t *testing.T, what string, got []string, n int) {
	t.Helper()
	replaced := 0
	for _, s := range got {
		if !utf8.ValidString(s) {
			t.Errorf("%s: %q is not valid UTF-8", what, s)
		}
		if strings.Contains(s, "\uFFFD") {
			replaced++
		}
	}
	if replaced < n {
		t.Errorf("%s: %d strings show U+FFFD, want %d: %q", what, replaced, n, got)
	}
}

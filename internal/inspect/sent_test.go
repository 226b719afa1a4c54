package inspect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/adstap/adstap/internal/testutil/inspecttest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

func TestReadSentSaysWhatTheCaptureHas(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	files := []string{sc.Path}
	tests := []struct {
		name string
		node string
		at   Point
		want string
	}{
		{"two nodes", "", Point{}, "pushed to 2 nodes; choose one with --node: " + inspecttest.CDSNode + ", " + inspecttest.SDSNode},
		{"no such node", "nobody", Point{}, `no push to node "nobody"`},
		{"no such version", inspecttest.CDSNode, Point{Version: "v9"}, `no push of version "v9" to node ` + inspecttest.CDSNode + "; the versions pushed to it: v1, v2, v3, v4"},
		{"no such push", inspecttest.CDSNode, Point{PushID: "p9"}, `no push of push "p9"`},
		{"before the first push", inspecttest.CDSNode, Point{Time: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}, "at or before 2000-01-01T00:00:00Z: its first push was at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadSent(context.Background(), files, tt.node, tt.at, nil)
			if !errors.As(err, new(*InputError)) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line with %q", err, tt.want)
			}
		})
	}
	// As of each version, the clusters the script pushed.
	for v, want := range map[string]int{"v1": 3, "v2": 4, "v3": 5, "v4": 5} {
		sent, err := ReadSent(context.Background(), files, inspecttest.CDSNode, Point{Version: v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cds := sent.Type(resource.ClusterType); len(cds.Resources) != want || cds.Version != v {
			t.Errorf("as of %s: %d clusters of version %s, want %d", v, len(cds.Resources), cds.Version, want)
		}
	}
}

func TestReadSentNamesTheFileAndRecordOfBadInput(t *testing.T) {
	leakcheck.Check(t)
	sc := record(t, inspecttest.Options{})
	b, err := os.ReadFile(sc.Path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string // the file's records
	for _, r := range splitRecords(t, b) {
		lines = append(lines, string(r))
	}
	dir := t.TempDir()

	corrupt := filepath.Join(dir, "corrupt.jsonl")
	bad := append(append([]string{}, lines[:4]...), "{not a record\n")
	os.WriteFile(corrupt, []byte(strings.Join(append(bad, lines[4:]...), "")), 0o600)
	_, err = ReadSent(context.Background(), []string{corrupt}, inspecttest.CDSNode, Point{}, nil)
	if !errors.As(err, new(*InputError)) || !strings.Contains(err.Error(), corrupt+" is corrupt at record 5") || strings.Contains(err.Error(), "\n") {
		t.Errorf("corrupt: err = %v, want one line naming %s and record 5", err, corrupt)
	}

	// The file is cut in the record after the first push to the CDS node,
	// long before its push of v4. Where that push is depends on how the
	// two nodes' streams interleaved in the capture, which is the
	// machine's doing: it is looked for.
	cut := filepath.Join(dir, "cut.jsonl")
	whole := 0
	for k := 1; k < len(lines) && whole == 0; k++ {
		os.WriteFile(cut, []byte(strings.Join(lines[:k], "")), 0o600)
		if _, err := ReadSent(context.Background(), []string{cut}, inspecttest.CDSNode, Point{}, nil); err == nil {
			whole = k
		}
	}
	if whole == 0 || whole == len(lines) {
		t.Fatalf("no record of the capture's %d but its last is a push to %s", len(lines), inspecttest.CDSNode)
	}
	os.WriteFile(cut, []byte(strings.Join(lines[:whole], "")+lines[whole][:len(lines[whole])/2]), 0o600)
	var warn syncbuf.Buffer
	_, err = ReadSent(context.Background(), []string{cut}, inspecttest.CDSNode, Point{Version: "v4"}, &warn)
	if !errors.As(err, new(*InputError)) || !strings.Contains(err.Error(), `no push of version "v4"`) {
		t.Errorf("cut: err = %v, want the version missing", err)
	}
	record := fmt.Sprintf("ends in an incomplete record (record %d", whole+1)
	if w := warn.String(); !strings.Contains(w, "adstap replay: warning: "+cut+" "+record) || strings.Count(w, "\n") != 1 {
		t.Errorf("cut: warning %q, want one line naming the file and record %d", w, whole+1)
	}
}

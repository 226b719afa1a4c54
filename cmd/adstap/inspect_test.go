package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/inspecttest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// recordCapture runs the real tap, capturing, through inspecttest's
// scripted scenario: CDS v1 ACK, v2 ACK, v3 NACKed 3 times, v4 ACK; one SDS
// secret.
func recordCapture(t *testing.T) *inspecttest.Scenario {
	t.Helper()
	return inspecttest.Record(t, filepath.Join(t.TempDir(), "capture.jsonl"), inspecttest.Options{})
}

func inspectCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return subcommandCLI(t, "inspect", args...)
}

// subcommandCLI runs adstap NAME ARGS... and returns what it exits with and
// writes.
func subcommandCLI(t *testing.T, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runCLI(t.Context(), append([]string{name}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestInspectShowsEachMode(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	cdsRow := regexp.MustCompile(`\n  CDS\s+6\s+3\s+3\s+\S+\s+1/5\s+0\s+0\s+0\s+1\s+v=v4 ack\n`)
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		want      []string
		wantRE    *regexp.Regexp
		wantNotIn []string
	}{
		{name: "timeline and summary", args: []string{sc.Path}, wantRE: cdsRow,
			want: []string{"INFO  stream 1 open: sotw StreamAggregatedResources", "WARN  NACK loop started", "SUMMARY", "2 streams, 7 pushes, 4 ACKs, 3 NACKs"}},
		{name: "summary only", args: []string{"--summary-only", sc.Path}, wantRE: cdsRow,
			want: []string{"SUMMARY"}, wantNotIn: []string{"INFO  stream 1 open"}},
		{name: "timeline only", args: []string{sc.Path, "--timeline-only"},
			want: []string{"INFO  CDS v=v2 +1 -0 ~1 =2"}, wantNotIn: []string{"SUMMARY"}},
		{name: "push", args: []string{"--push", "v2", sc.Path},
			want: []string{"version v2: 1 push on 1 stream", "  + " + inspecttest.Ratings + "\n", "  ~ " + inspecttest.Reviews + "\n"}},
		{name: "push with resources", args: []string{sc.Path, "--push=v2", "--resources"},
			want: []string{`      ~ connect_timeout: "5s" → "7s"`, `"name": "` + inspecttest.Ratings + `"`}},
		{name: "nacks", args: []string{sc.Path, "--nacks"},
			want: []string{"3 NACKs, 1 distinct", "×3  stream 1  CDS", "rejected version: v3", inspecttest.NACKMessage}},
		{name: "one node", args: []string{sc.Path, "--node", inspecttest.SDSNode},
			want:      []string{"INFO  stream 2 open", "1 stream, 1 push, 1 ACK, 0 NACKs"},
			wantNotIn: []string{"stream 1 open", "NACK loop", "CDS"}},
		{name: "one stream's nacks", args: []string{sc.Path, "--stream=1", "--nacks"}, want: []string{"×3  stream 1  CDS"}},
		{name: "one type's nacks", args: []string{sc.Path, "--type=secret", "--nacks"}, want: []string{"no NACK in"}},
		{name: "since an hour ago", args: []string{sc.Path, "--since=1h", "--summary-only"}, want: []string{"7 pushes, 4 ACKs, 3 NACKs"}},
		{name: "until before the capture", args: []string{sc.Path, "--until=2000-01-01T00:00:00Z"},
			want: []string{"0 pushes, 0 ACKs, 0 NACKs"}, wantNotIn: []string{"INFO  stream 1 open", "capture file"}},
		{name: "nacks from the environment", args: []string{sc.Path}, env: map[string]string{"ADSTAP_NACKS": "true"},
			want: []string{"×3  stream 1  CDS"}, wantNotIn: []string{"SUMMARY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withEnv(t, tt.env)
			code, out, errOut := inspectCLI(t, tt.args...)
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNotIn {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			if tt.wantRE != nil && !tt.wantRE.MatchString(out) {
				t.Errorf("output does not match %s:\n%s", tt.wantRE, out)
			}
		})
	}
}

func TestInspectExitStatus(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	dir := t.TempDir()
	notCapture := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notCapture, []byte("just some notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sc.Path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.jsonl")
	if err := os.WriteFile(cut, data[:len(data)-40], 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStderr string
	}{
		{"no file", nil, exitUsage, "name at least one capture FILE"},
		{"unknown flag", []string{"--bogus", sc.Path}, exitUsage, "flag provided but not defined: --bogus"},
		{"bad threshold", []string{"--push-timeout=0s", sc.Path}, exitUsage, "want a positive duration"},
		{"push without a version", []string{sc.Path, "--push"}, exitUsage, "flag needs an argument: --push"},
		{"resources without push", []string{"--resources", sc.Path}, exitUsage, "--resources goes with --push=VERSION"},
		{"push and nacks", []string{"--push=v1", "--nacks", sc.Path}, exitUsage, "exclude each other"},
		{"jsonl and a filter", []string{"--jsonl", "--node=x", sc.Path}, exitUsage, "combines with --follow only"},
		{"summary and timeline only", []string{"--summary-only", "--timeline-only", sc.Path}, exitUsage, "exclude each other"},
		{"follow and nacks", []string{"--follow", "--nacks", sc.Path}, exitUsage, "does not combine"},
		{"unknown type", []string{"--type=pods", sc.Path}, exitUsage, `--type "pods"`},
		{"bad time", []string{"--since=yesterday", sc.Path}, exitUsage, "want RFC 3339"},
		{"until before since", []string{"--since=2026-11-30T10:00:00Z", "--until=2026-11-30T09:00:00Z", sc.Path}, exitUsage, "--until is before --since"},
		{"stream zero", []string{"--stream=0", sc.Path}, exitUsage, "want a stream id"},
		{"missing file", []string{filepath.Join(dir, "nope.jsonl")}, exitUsage, "no such file or directory"},
		{"not a capture", []string{notCapture}, exitUsage, "not an adstap capture file: " + notCapture},
		{"cut short", []string{"--summary-only", cut}, exitOK, "adstap inspect: warning: " + cut + " ends in an incomplete record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := inspectCLI(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.wantStderr) {
				t.Errorf("exit %d with stderr %q, want %d with %q", code, errOut, tt.code, tt.wantStderr)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("stderr has more than one line: %q", errOut)
			}
		})
	}

	code, out, _ := inspectCLI(t, "--help")
	if code != exitOK || !strings.Contains(out, "adstap inspect [flags] FILE...") || !strings.Contains(out, "--nack-storm-threshold") || !strings.Contains(out, "Examples:") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	var top bytes.Buffer
	runCLI(t.Context(), []string{"help"}, &top, &top)
	if !strings.Contains(top.String(), "\n  inspect ") {
		t.Errorf("the top help does not list inspect:\n%s", top.String())
	}
}

// TestInspectFollowStopsOnCtrlC: --follow prints the timeline of what the
// file holds, waits for more, and prints the summary when stopped.
func TestInspectFollowStopsOnCtrlC(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, errOut syncbuf.Buffer
	exited := make(chan int, 1)
	go func() { exited <- runCLI(ctx, []string{"inspect", "--follow", sc.Path}, &out, &errOut) }()
	if !xdstest.Until(xdstest.WaitTimeout, func() bool { return strings.Contains(out.String(), "stream 2 closed") }) {
		stop()
		<-exited
		t.Fatalf("no timeline after %v:\n%s", xdstest.WaitTimeout, out.String())
	}
	if strings.Contains(out.String(), "SUMMARY") {
		t.Fatal("the summary came before --follow was stopped")
	}
	stop()
	select {
	case code := <-exited:
		if code != exitOK || errOut.String() != "" || !strings.Contains(out.String(), "SUMMARY") {
			t.Errorf("exit %d, stderr %q, output:\n%s", code, errOut.String(), out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("--follow did not stop after Ctrl-C")
	}
}

package runconfig_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// parse defines `adstap run`'s flags on a plain flag set and parses args.
func parse(t *testing.T, args ...string) (runconfig.Flags, error) {
	t.Helper()
	var f runconfig.Flags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	runconfig.Define(runconfig.FlagSet(fs), &f)
	return f, fs.Parse(args)
}

// The help of --nack-keep-bytes says 0 keeps none: 0 is taken, and the
// tracker is told to keep nothing (its own zero would be its default).
func TestNACKKeepBytesZeroKeepsNone(t *testing.T) {
	leakcheck.Check(t)
	var help string
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	runconfig.Define(runconfig.FlagSet(fs), new(runconfig.Flags))
	help = fs.Lookup("nack-keep-bytes").Usage
	if !strings.HasSuffix(help, "0 keeps none") {
		t.Fatalf("--nack-keep-bytes' help no longer says what 0 does: %q", help)
	}
	for _, tt := range []struct {
		args []string
		want int64
	}{
		{nil, track.DefaultKeepBytes},
		{[]string{"--nack-keep-bytes=0"}, -1},
		{[]string{"--nack-keep-bytes=1MiB"}, 1 << 20},
	} {
		f, err := parse(t, append([]string{"--upstream=127.0.0.1:1"}, tt.args...)...)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		run, err := runconfig.Build(f, runconfig.Env{})
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got := run.Observe.Detect.KeepBytes; got != tt.want {
			t.Errorf("%v: the tracker keeps %d bytes, want %d", tt.args, got, tt.want)
		}
	}
	if _, err := parse(t, "--nack-keep-bytes=-1"); err == nil {
		t.Error("--nack-keep-bytes=-1 was taken")
	}
}

// The help of --observe-workers says what 0 does: 0 is taken, and handed to
// the tap as is, whose zero is as many workers as GOMAXPROCS.
func TestObserveWorkersZeroIsGOMAXPROCS(t *testing.T) {
	leakcheck.Check(t)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	runconfig.Define(runconfig.FlagSet(fs), new(runconfig.Flags))
	if help := fs.Lookup("observe-workers").Usage; !strings.Contains(help, "0: as many as the cores") {
		t.Fatalf("--observe-workers' help no longer says what 0 does: %q", help)
	}
	for _, tt := range []struct {
		args []string
		want int
	}{
		{nil, 0},
		{[]string{"--observe-workers=0"}, 0},
		{[]string{"--observe-workers=3"}, 3},
	} {
		f, err := parse(t, append([]string{"--upstream=127.0.0.1:1"}, tt.args...)...)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		run, err := runconfig.Build(f, runconfig.Env{})
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got := run.Tap.ObserveWorkers; got != tt.want {
			t.Errorf("%v: tap.Config.ObserveWorkers = %d, want %d", tt.args, got, tt.want)
		}
	}
	for _, bad := range []string{"-1", "many"} {
		if _, err := parse(t, "--observe-workers="+bad); err == nil {
			t.Errorf("--observe-workers=%s was taken", bad)
		}
	}
}

// Every other size flag still wants a positive size: 0 would mean nothing
// sensible for them.
func TestSizesArePositive(t *testing.T) {
	leakcheck.Check(t)
	for _, name := range []string{"max-message-size", "observe-queue-bytes", "output-queue-bytes", "capture-max-bytes", "retain-max-bytes"} {
		if _, err := parse(t, "--"+name+"=0"); err == nil {
			t.Errorf("--%s=0 was taken", name)
		}
		if _, err := parse(t, "--"+name+"=2MiB"); err != nil {
			t.Errorf("--%s=2MiB: %v", name, err)
		}
	}
}

// Defaults are the flags as `adstap run` has them given none: the ones
// whose defaults decide the tap's cost are on.
func TestDefaults(t *testing.T) {
	leakcheck.Check(t)
	f, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	d := runconfig.Defaults()
	if d.CheckReferences != f.CheckReferences || !d.CheckReferences || d.Listen != runconfig.DefaultListen || d.NACKKeepBytes != f.NACKKeepBytes || d.Detect != f.Detect {
		t.Errorf("Defaults() = %+v, the parsed defaults %+v", d, f)
	}
}

func TestBuildFailsOnBadFlags(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--upstream is required"},
		{[]string{"--upstream=127.0.0.1:1", "--trace-grouping=node"}, "--trace-grouping"},
		{[]string{"--upstream=127.0.0.1:1", "--max-message-size=3GiB"}, "at most 2GiB"},
	} {
		f, err := parse(t, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := runconfig.Build(f, runconfig.Env{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one saying %q", tt.args, err, tt.want)
		}
	}
}

// Each of the pipeline's listeners names, in its errors, a flag `adstap
// run` has.
func TestListenersAreFlags(t *testing.T) {
	leakcheck.Check(t)
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	runconfig.Define(runconfig.FlagSet(fs), new(runconfig.Flags))
	for _, l := range pipeline.Listeners {
		if fs.Lookup(l.String()) == nil {
			t.Errorf("listener %d is named --%s, which adstap run does not have", int(l), l)
		}
	}
}

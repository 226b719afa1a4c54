package benchmark

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestTapIsAdstapRunAsShipped: the Tap path runs what `adstap run` runs
// given only the flags a benchmark must set — where it listens, its
// upstream, its admin address — field by field. A default of `adstap run`
// that does not reach the benchmark's tap (a flag's default overridden, a
// configuration built by hand) fails here; so does a new override that is
// not listed.
func TestTapIsAdstapRunAsShipped(t *testing.T) {
	leakcheck.Check(t)
	const upstream, listen = "127.0.0.1:15010", "127.0.0.1:0"
	// Every flag the benchmark sets. Its log (to /dev/null at the default
	// level and format), version and empty environment (benchEnv) are not
	// flags: they are the same on both sides.
	overrides := []string{"--upstream=" + upstream, "--listen=" + listen, "--admin=127.0.0.1:0"}

	var f runconfig.Flags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runconfig.Define(runconfig.FlagSet(fs), &f)
	if err := fs.Parse(overrides); err != nil {
		t.Fatal(err)
	}
	log, logOut, err := runconfig.NewLog(io.Discard, f.LogLevel, f.LogFormat)
	if err != nil {
		t.Fatal(err)
	}
	defer runconfig.CloseLog(logOut, time.Second)
	want, err := runconfig.Build(f, benchEnv(log, logOut))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tapRunConfig(Tap, upstream, listen, log, logOut, nil)
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	n := diffValues("RunConfig", reflect.ValueOf(want), reflect.ValueOf(got), &diffs)
	for _, d := range diffs {
		t.Errorf("the benchmark's tap differs from `adstap run %v` in %s", overrides, d)
	}
	if n < 30 {
		t.Errorf("compared %d fields; the comparison no longer reaches into the configuration", n)
	}

	// The lean path differs in what it turns off, and only there.
	lean, err := tapRunConfig(TapLean, upstream, listen, log, logOut, nil)
	if err != nil {
		t.Fatal(err)
	}
	diffs = nil
	diffValues("RunConfig", reflect.ValueOf(want), reflect.ValueOf(lean), &diffs)
	if !reflect.DeepEqual(diffs, []string{"RunConfig.Observe.CheckReferences: true, not false"}) {
		t.Errorf("tap-lean differs from the tap as shipped in %q; want the reference check alone", diffs)
	}
}

// diffValues appends to diffs where a and b differ, walking structs,
// pointers, interfaces, slices and maps; funcs compare by being set or not
// (two closures of the same code are never equal). It returns how many
// values it compared.
func diffValues(path string, a, b reflect.Value, diffs *[]string) int {
	differ := func(format string, args ...any) {
		*diffs = append(*diffs, path+": "+fmt.Sprintf(format, args...))
	}
	if a.IsValid() != b.IsValid() {
		differ("set on one side only")
		return 1
	}
	if !a.IsValid() {
		return 1
	}
	if a.Type() != b.Type() {
		differ("%v, not %v", a.Type(), b.Type())
		return 1
	}
	switch a.Kind() {
	case reflect.Struct:
		n := 0
		for i := range a.NumField() {
			n += diffValues(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i), diffs)
		}
		return n
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				differ("nil on one side only")
			}
			return 1
		}
		if a.Kind() == reflect.Pointer && a.Pointer() == b.Pointer() {
			return 1
		}
		return diffValues(path, a.Elem(), b.Elem(), diffs)
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		if a.IsNil() != b.IsNil() {
			differ("set on one side only")
		}
		return 1
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			differ("%d elements, not %d", a.Len(), b.Len())
			return 1
		}
		n := 1
		for i := range a.Len() {
			n += diffValues(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), diffs)
		}
		return n
	case reflect.Map:
		if a.Len() != b.Len() {
			differ("%d entries, not %d", a.Len(), b.Len())
			return 1
		}
		n := 1
		for _, k := range a.MapKeys() {
			n += diffValues(fmt.Sprintf("%s[%v]", path, k), a.MapIndex(k), b.MapIndex(k), diffs)
		}
		return n
	}
	if !a.Equal(b) {
		differ("%v, not %v", a, b)
	}
	return 1
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/runconfig"
)

// everyCommand is every subcommand's flag set, with its defaults: the one
// source the docs are checked against.
func everyCommand() []*command {
	return []*command{
		runCommand(new(runFlags)),
		statusCommand(new(statusFlags)),
		configCommand(new(configFlags)),
		inspectCommand(new(inspectFlags)),
		replayCommand(new(replayFlags)),
		rolloutCommand(new(rolloutFlags)),
		probeCommand(new(probeFlags)),
		demoCommand(new(demoFlags)),
	}
}

// Every subcommand reads each of its flags from its ADSTAP_* twin too, and
// its help names the twin.
func TestEveryFlagHasItsEnvironmentTwin(t *testing.T) {
	for _, c := range everyCommand() {
		grouped := map[string]bool{}
		for _, g := range c.groups {
			for _, name := range g.names {
				grouped[name] = true
			}
		}
		var help strings.Builder
		c.help(&help)
		c.fs.VisitAll(func(f *flag.Flag) {
			twin := envName(f.Name)
			if !grouped[f.Name] {
				t.Errorf("adstap %s --%s is in no group of the help", c.name, f.Name)
			}
			if !strings.Contains(help.String(), "(env "+twin) {
				t.Errorf("adstap %s --help does not name --%s's twin %s", c.name, f.Name, twin)
			}
			// A fresh command, given only the twin: it either takes the
			// value or fails naming the twin; both show the twin is read.
			fresh := commandNamed(t, c.name)
			err := fresh.parse(nil, func(k string) string {
				if k == twin {
					return "x"
				}
				return ""
			})
			switch {
			case err != nil && !strings.Contains(err.Error(), twin):
				t.Errorf("adstap %s with %s=x: error %v names no %s", c.name, twin, err, twin)
			case err == nil && !fresh.isSet(f.Name):
				t.Errorf("adstap %s: %s=x does not set --%s", c.name, twin, f.Name)
			}
		})
	}
}

func commandNamed(t *testing.T, name string) *command {
	t.Helper()
	for _, c := range everyCommand() {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no command %s", name)
	return nil
}

// foreignFlags are the flags of other tools the docs and the injection
// template show; every other --flag in them must be one of adstap's.
var foreignFlags = map[string][]string{
	"kubectl":               {"patch-file", "type", "cert", "key", "namespace", "context"},
	"docker":                {"build-arg", "platform"},
	"helm":                  {"reuse-values"},
	"istioctl":              {"revision"},
	"pilot-agent":           {"log_output_level", "log_as_json", "force-apply", "native-nftables"},
	"prometheus":            {"enable-feature"},
	"istioctl proxy-status": {"xds-address", "plaintext"},
	"protoc":                {"decode_raw"},
	"adstap-bench":          {"mode"},
}

func isForeign(name string) bool {
	for _, names := range foreignFlags {
		if slices.Contains(names, name) {
			return true
		}
	}
	return false
}

// docFiles are the files that name adstap's flags: every page of docs/,
// the README and the injection templates.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"../../docs/*.md", "../../README.md", "../../deploy/sidecar.yaml", "../../deploy/istio/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s: %v, %d files", pattern, err, len(m))
		}
		files = append(files, m...)
	}
	return files
}

// TestDocsNameRealFlagsWithTheirDefaults: every --flag the docs name is a
// flag of some subcommand (or of another tool, foreignFlags), every
// ADSTAP_* variable they name is the twin of one, and every
// default they state for one is its default in the flag table. A default is
// read only in the forms below, right after the flag's mention (see
// statedDefault); anything else the docs say about a flag is not a default.
func TestDocsNameRealFlagsWithTheirDefaults(t *testing.T) {
	flags := map[string][]flagOf{}
	twins := map[string]bool{}
	for _, c := range everyCommand() {
		c.fs.VisitAll(func(f *flag.Flag) {
			flags[f.Name] = append(flags[f.Name], flagOf{c.name, f})
			twins[envName(f.Name)] = true
		})
	}
	checked := 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(file, "../../")
		for _, twin := range slices.Compact(slices.Sorted(slices.Values(twinMention.FindAllString(string(text), -1)))) {
			if !twins[twin] && !slices.Contains(testVariables, twin) {
				t.Errorf("%s: %s is the twin of no flag of any adstap command", name, twin)
			}
		}
		for _, u := range docUnits(string(text), strings.HasSuffix(file, ".md")) {
			for _, m := range flagMention.FindAllStringSubmatchIndex(u.text, -1) {
				flagName := u.text[m[2]:m[3]]
				defs, ok := flags[flagName]
				if !ok {
					if flagName != "help" && !isForeign(flagName) {
						t.Errorf("%s:%d: --%s is no flag of any adstap command (nor of another tool in foreignFlags)", name, u.lineAt(m[2]), flagName)
					}
					continue
				}
				// A flag of several commands may be of several kinds
				// (inspect's --since is a time, rollout's a duration): the
				// doc states a default if it states one of any of them, and
				// it is right if it is one of theirs.
				var stated string
				var found bool
				var want []string
				for _, d := range defs {
					v, ok := statedDefault(u.text[m[1]:], d.f)
					if !ok {
						continue
					}
					if sameDefault(v, d.f) {
						stated, found, want = v, true, nil
						break
					}
					stated, found = v, true
					want = append(want, fmt.Sprintf("%q (adstap %s)", d.f.DefValue, d.cmd))
				}
				if !found {
					continue
				}
				checked++
				if want != nil {
					t.Errorf("%s:%d: --%s: the doc says its default is %q, the flag table %s", name, u.lineAt(m[2]), flagName, stated, strings.Join(want, ", "))
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("read only %d stated defaults in the docs: the forms statedDefault reads no longer match how they write them", checked)
	}
}

type flagOf struct {
	cmd string
	f   *flag.Flag
}

// flagMention is a --flag in prose, a table, a command line or YAML; a
// "--" alone (kubectl exec's separator) is none.
var flagMention = regexp.MustCompile("(?:^|[\\s\"'`(\\[,])--([a-z][a-z0-9_-]*[a-z0-9])")

// testVariables are the ADSTAP_* variables of the suites and the
// benchmark, which the docs name too: no flag's twins.
var testVariables = []string{"ADSTAP_SOAK", "ADSTAP_FIGURES", "ADSTAP_UPDATE_SCREENSHOT"}

var twinMention = regexp.MustCompile(`\bADSTAP_[A-Z0-9_]*[A-Z0-9]\b`)

type docUnit struct {
	line int
	text string
	// starts are where each of the unit's lines after its first starts
	// in text.
	starts []int
}

// lineAt is the line of the page that position i of u's text is on.
func (u docUnit) lineAt(i int) int {
	n := 0
	for n < len(u.starts) && u.starts[n] <= i {
		n++
	}
	return u.line + n
}

// docUnits splits a page into what one sentence about a flag stays within:
// a Markdown paragraph (its lines joined), a table row, a line of a code
// block; in YAML, a line.
func docUnits(text string, markdown bool) []docUnit {
	var units []docUnit
	var para []string
	var starts []int
	start, fence, length := 0, false, 0
	flush := func() {
		if len(para) > 0 {
			units = append(units, docUnit{start, strings.Join(para, " "), starts})
			para, starts, length = nil, nil, 0
		}
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !markdown:
			units = append(units, docUnit{line: i + 1, text: line})
		case strings.HasPrefix(trimmed, "```"):
			flush()
			fence = !fence
		case fence || strings.HasPrefix(trimmed, "|"):
			flush()
			units = append(units, docUnit{line: i + 1, text: line})
		case trimmed == "":
			flush()
		default:
			if len(para) == 0 {
				start = i + 1
			} else {
				length++ // the space joining it
				starts = append(starts, length)
			}
			para = append(para, trimmed)
			length += len(trimmed)
		}
	}
	flush()
	return units
}

// docValue is how the docs write a default: `in backticks`, a number with
// thousands separators (20,000), or a word, perhaps followed by a unit
// ("64 MiB", "15 s").
const docValue = "(`[^`]*`|\\d{1,3}(?:,\\d{3})+|[^\\s,;()`]+(?: (?:[KMG]iB|[KMG]i|B|ms|s|m|h)\\b)?)"

var (
	// `--x` (V), `--x` (V by default), `--x` (default V), `--x`
	// (`ADSTAP_X`, V by default): the first thing in parentheses right after
	// the flag, its twin aside.
	inParens = regexp.MustCompile(`^ \(([^()]*)\)`)
	// `--x`, V by default
	byDefault = regexp.MustCompile(`^,? ` + docValue + ` by default\b`)
	// (with `--x`, the default): a bool flag that is on
	theDefault = regexp.MustCompile(`^,? the default\b`)
	// `--x` defaults to V
	defaultsTo = regexp.MustCompile(`^ defaults to ` + docValue)
	// `--x`, V) or `--x` V, — a bare number, size or duration
	bare = regexp.MustCompile(`^,? ` + docValue + `(?:[,;)]|$)`)
	// `--x`, … (default V), `--x`, … (the default, V, …), and a table
	// row's "(default V)": later in the flag's sentence, before another flag
	defaultLater = regexp.MustCompile(`\((?:the )?default,? ` + docValue + `[,)]`)
	// | `--x` | … | what it does (V) |: a table row's last cell ending in
	// the value
	endOfRow    = regexp.MustCompile(`\(` + docValue + `\) \|\s*$`)
	twinItem    = regexp.MustCompile("^`?ADSTAP_[A-Z0-9_]+`?$")
	nextMention = regexp.MustCompile("(?:^|[\\s\"'`(\\[,])--[a-z]|\\. ")
)

// statedDefault reads the default the docs state in rest, the text right
// after a flag's name, in one of the forms above; ok is false when they
// state none there (or something that is not a value of f's kind, like
// "GOMAXPROCS" for a count: what a default means, not the default).
func statedDefault(rest string, f *flag.Flag) (v string, ok bool) {
	rest = strings.TrimPrefix(rest, "`")
	if strings.HasPrefix(rest, "=") {
		return "", false // a value given, not a default
	}
	if loc := nextMention.FindStringIndex(rest); loc != nil {
		rest = rest[:loc[0]]
	}
	worded := func(v string) (string, bool) {
		if !isLiteral(v, f, true) {
			return "", false
		}
		return v, true
	}
	if m := inParens.FindStringSubmatch(rest); m != nil {
		for item := range strings.SplitSeq(m[1], ", ") {
			item, _, _ = strings.Cut(item, "; ")
			item, _, _ = strings.Cut(item, ": ")
			if twinItem.MatchString(item) {
				continue
			}
			if v, ok := strings.CutSuffix(item, " by default"); ok {
				return worded(v)
			}
			if v, ok := strings.CutPrefix(item, "default "); ok {
				return worded(v)
			}
			if isLiteral(item, f, false) {
				return item, true
			}
			break
		}
	}
	if theDefault.MatchString(rest) && kind(f) == "bool" {
		return "on", true
	}
	for _, re := range []*regexp.Regexp{byDefault, defaultsTo} {
		if m := re.FindStringSubmatch(rest); m != nil {
			return worded(m[1])
		}
	}
	if m := bare.FindStringSubmatch(rest); m != nil && isLiteral(m[1], f, false) {
		return m[1], true
	}
	if m := defaultLater.FindStringSubmatch(rest); m != nil {
		return worded(m[1])
	}
	if m := endOfRow.FindStringSubmatch(rest); m != nil && isLiteral(m[1], f, false) {
		return m[1], true
	}
	return "", false
}

// kind is how a flag's values are written: a bool, a whole number, a
// duration, a size, or anything else (a string).
func kind(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	if _, err := strconv.Atoi(f.DefValue); err == nil {
		return "int"
	}
	if _, err := time.ParseDuration(f.DefValue); err == nil {
		return "duration"
	}
	var b runconfig.ByteSize
	if b.Set(f.DefValue) == nil {
		return "size"
	}
	return "string"
}

// isLiteral reports whether v is a value of f's kind; a string flag's
// value counts only where the docs call it the default (worded).
func isLiteral(v string, f *flag.Flag, worded bool) bool {
	_, err := parseDoc(v, f)
	return err == nil && (worded || kind(f) != "string")
}

// parseDoc turns a value as the docs write it into the form of f's
// DefValue, to compare.
func parseDoc(v string, f *flag.Flag) (string, error) {
	raw := v
	v = strings.Trim(v, "`\"")
	compact := strings.ReplaceAll(v, " ", "")
	if kind(f) == "int" {
		compact = strings.ReplaceAll(compact, ",", "")
	}
	switch kind(f) {
	case "bool":
		switch v {
		case "on", "true":
			return "true", nil
		case "off", "false":
			return "false", nil
		}
		return "", errors.New("not on or off")
	case "int":
		n, err := strconv.Atoi(compact)
		return strconv.Itoa(n), err
	case "duration":
		d, err := time.ParseDuration(compact)
		return d.String(), err
	case "size":
		var b runconfig.ByteSize
		err := b.Set(compact)
		return b.String(), err
	}
	// A string is a default only in backticks (`127.0.0.1:15101`), or the
	// word for none: "loopback" says what a default is, not which.
	if raw == "off" || raw == "none" {
		return "", nil
	}
	if len(raw) < 2 || raw[0] != '`' {
		return "", errors.New("no string in backticks")
	}
	return v, nil
}

func sameDefault(v string, f *flag.Flag) bool {
	got, err := parseDoc(v, f)
	if err != nil {
		return false
	}
	if kind(f) == "string" && f.DefValue == "off" && got == "" {
		return true
	}
	if kind(f) == "duration" {
		d, _ := time.ParseDuration(f.DefValue)
		return got == d.String()
	}
	return got == f.DefValue
}

// The forms statedDefault reads, and what it leaves alone.
func TestStatedDefault(t *testing.T) {
	var f runFlags
	fs := runCommand(&f).fs
	for _, tt := range []struct {
		doc    string
		want   string
		wantOK bool
	}{
		{"`--metrics-max-nodes` (100) distinct values", "100", true},
		{"`--max-message-size` (512 MiB by default) pass", "512 MiB", true},
		{"`--initial-fetch-timeout` (15 s, Envoy's default; Istio sets EDS's to 0) becomes", "15 s", true},
		{"`--metrics-listen` (`ADSTAP_METRICS_LISTEN`, off by default),", "off", true},
		{"`--check-references` (on by default) keeps", "on", true},
		{"(with `--check-references`, the default) lists", "on", true},
		{"`--admin`, `127.0.0.1:15101` by default, loopback", "`127.0.0.1:15101`", true},
		{"(`--admin` defaults to `127.0.0.1:15101`)", "`127.0.0.1:15101`", true},
		{"(`--max-concurrent-streams`, 20,000) and", "20,000", true},
		{"within `--nack-keep-bytes`, 64 MiB): it", "64 MiB", true},
		{"`--output-queue-bytes`, 16MiB in the sidecar (default 64MiB), plus", "64MiB", true},
		{"`--observe-queue-bytes`, 64MiB in the sidecar (the default, 256MiB, is for", "256MiB", true},
		{"| `--push-timeout` | `ADSTAP_PUSH_TIMEOUT` | how long a push may wait (30s) |", "30s", true},
		// Not defaults: a value given, the sidecar's, a meaning, another
		// flag's, a word that is no value, a string out of backticks.
		{"    - --output-queue-bytes=16MiB", "", false},
		{"`--output-queue-bytes` (16 MiB in the sidecar)", "", false},
		{"(`--observe-workers`, `tap.Config.ObserveWorkers`, GOMAXPROCS by default)", "", false},
		{"`--full-sync-window` (more than one a minute by default)", "", false},
		{"`--capture-max-bytes` × `--capture-max-files` (128 MiB with the template's 32 MiB × 4)", "", false},
		{"(`--admin`, loopback by default)", "", false},
		{"`--retain-resources` (docs/debug.md)", "", false},
	} {
		m := flagMention.FindStringSubmatchIndex(tt.doc)
		if m == nil {
			t.Fatalf("%q: no flag", tt.doc)
		}
		fl := fs.Lookup(tt.doc[m[2]:m[3]])
		if fl == nil {
			t.Fatalf("%q: no flag %s of adstap run", tt.doc, tt.doc[m[2]:m[3]])
		}
		got, ok := statedDefault(tt.doc[m[1]:], fl)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("statedDefault(%q) = %q, %v; want %q, %v", tt.doc, got, ok, tt.want, tt.wantOK)
		}
	}
}

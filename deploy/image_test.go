package deploy_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

// The image: what can be checked without a Docker engine. The binary the
// Dockerfile builds is the Makefile's static build; it is statically linked;
// the paths and variables the Dockerfile, the Makefile and the binary share
// agree.

// makeVar is the value of NAME := or NAME ?= in the Makefile.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=[ \t]*(.*?)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return string(m[1])
}

// ldflagsVars are the -X assignments of an ldflags string: variable -> value.
func ldflagsVars(ldflags string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`-X[ =]([^=\s]+)=(\S*)`).FindAllStringSubmatch(ldflags, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// TestStaticBinary builds adstap as `make build` does and checks that it is
// statically linked and that the version variables the Makefile sets exist
// (-X on a missing variable is silently ignored).
func TestStaticBinary(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	const version, commit = "v0.0.0-imagetest", "0123456789ab"
	ldflags := strings.NewReplacer("$(VERSION)", version, "$(COMMIT)", commit).Replace(makeVar(t, "LDFLAGS"))
	vars := ldflagsVars(ldflags)
	if len(vars) == 0 {
		t.Fatalf("Makefile: LDFLAGS %q sets no variable with -X", makeVar(t, "LDFLAGS"))
	}
	bin := filepath.Join(t.TempDir(), "adstap")
	build := exec.Command(goTool(), "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "../cmd/adstap")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := checkStatic(bin); err != nil {
		t.Error(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("adstap version: %v\n%s", err, out)
	}
	for name, value := range vars {
		if !bytes.Contains(out, []byte(value)) {
			t.Errorf("the Makefile's -X %s=%s did not reach the binary: adstap version says\n%s", name, value, out)
		}
	}
	checkStatusInTheImage(t, bin)
}

// checkStatusInTheImage runs the static binary as the image does and asks it
// for `adstap status` and `adstap config` with nothing else at hand (an
// empty environment, no curl): what kubectl exec … -- /adstap status gets.
func checkStatusInTheImage(t *testing.T, bin string) {
	t.Helper()
	run := exec.Command(bin, "run", "--listen=127.0.0.1:0", "--admin=127.0.0.1:0", "--upstream=127.0.0.1:1", "--log-format=json")
	run.Env = []string{}
	var logs syncbuf.Buffer
	run.Stderr = &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		run.Process.Signal(os.Interrupt)
		run.Wait()
	}()
	adminRE := regexp.MustCompile(`"admin":"http://(127\.0\.0\.1:\d+)"`)
	var admin string
	deadline := time.Now().Add(10 * time.Second)
	for admin == "" {
		if m := adminRE.FindStringSubmatch(logs.String()); m != nil {
			admin = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adstap run did not say its admin address:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--admin", admin}, 0, "No streams"},
		{[]string{"status", "--admin", admin, "-o", "json"}, 0, `"in_sync": true`},
		{[]string{"config", "--admin", admin, "--stream", "1", "--type", "cluster"}, 1, "start adstap with --retain-resources"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("adstap %s: exit %d, want %d and %q:\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
}

// checkStatic reports whether an ELF file would need a dynamic loader, which
// the distroless static image does not have.
func checkStatic(file string) error {
	f, err := elf.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			errs = append(errs, errors.New(file+": has a program interpreter (PT_INTERP): dynamically linked"))
		case elf.PT_DYNAMIC:
			errs = append(errs, errors.New(file+": has a dynamic segment (PT_DYNAMIC)"))
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		errs = append(errs, errors.New(file+": has a .dynamic or .interp section"))
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		errs = append(errs, errors.New(file+": needs shared libraries "+strings.Join(libs, ", ")))
	}
	return errors.Join(errs...)
}

// TestCheckStaticCatchesDynamic: the check above fails on a dynamically
// linked program (the test binary of a cgo build, when one can be made).
func TestCheckStaticCatchesDynamic(t *testing.T) {
	leakcheck.Check(t)
	var dynamic string
	for _, p := range []string{"/bin/sh", "/usr/bin/env", "/bin/ls"} {
		if f, err := elf.Open(p); err == nil {
			interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
			f.Close()
			if interp {
				dynamic = p
				break
			}
		}
	}
	if dynamic == "" {
		t.Skip("no dynamically linked program on this machine to try the check on")
	}
	if err := checkStatic(dynamic); err == nil {
		t.Errorf("checkStatic(%s) passed a dynamically linked program", dynamic)
	}
}

// dockerfile is the Dockerfile as instructions, continuation lines joined.
type instruction struct {
	op   string // upper case: FROM, RUN, ...
	args string
	line int
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.Join(strings.Fields(args), " "), start})
		cur.Reset()
	}
	return out
}

// stage is one FROM ... section of the Dockerfile.
type stage struct {
	from, name string
	body       []instruction
}

func stages(ins []instruction) []stage {
	var out []stage
	for _, in := range ins {
		if in.op == "FROM" {
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].body = append(out[len(out)-1].body, in)
		}
	}
	return out
}

func (s stage) find(op string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.op == op {
			out = append(out, in)
		}
	}
	return out
}

// TestDockerfile checks the Dockerfile against the Makefile's build and the
// binary: same static build and ldflags, the built file is the one copied,
// the entrypoint is the copied file, run as the nonroot user.
func TestDockerfile(t *testing.T) {
	leakcheck.Check(t)
	st := stages(readDockerfile(t))
	if len(st) < 2 {
		t.Fatalf("Dockerfile: want a multi-stage build, found %d stages", len(st))
	}
	final := st[len(st)-1]

	// The build stage: the go build of the Makefile's build target.
	var build stage
	var goBuild string
	for _, s := range st[:len(st)-1] {
		for _, in := range s.find("RUN") {
			if strings.Contains(in.args, "go build") {
				build, goBuild = s, in.args
			}
		}
	}
	if goBuild == "" {
		t.Fatal("Dockerfile: no RUN ... go build in a build stage")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/adstap"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("Dockerfile: the go build lacks %s: %s", want, goBuild)
		}
	}
	if !strings.HasPrefix(build.from, "golang:") {
		t.Errorf("Dockerfile: build stage FROM %s, want golang:${GO_VERSION}", build.from)
	}
	m := regexp.MustCompile(`-ldflags[ =]"([^"]*)"`).FindStringSubmatch(goBuild)
	if m == nil {
		t.Fatalf("Dockerfile: the go build has no -ldflags \"...\": %s", goBuild)
	}
	dockerLdflags := strings.NewReplacer("${", "$(", "}", ")").Replace(m[1])
	if mk := makeVar(t, "LDFLAGS"); strings.Join(strings.Fields(dockerLdflags), " ") != strings.Join(strings.Fields(mk), " ") {
		t.Errorf("Dockerfile: -ldflags %q, the Makefile's LDFLAGS %q: the image would not be the binary of make build", m[1], mk)
	}
	args := map[string]bool{}
	for _, in := range build.find("ARG") {
		name, _, _ := strings.Cut(in.args, "=")
		args[name] = true
	}
	for _, v := range ldflagsVars(dockerLdflags) {
		name := strings.TrimSuffix(strings.TrimPrefix(v, "$("), ")")
		if name != v && !args[name] {
			t.Errorf("Dockerfile: -ldflags uses ${%s}, but the build stage declares no ARG %s", name, name)
		}
	}
	out := regexp.MustCompile(`(?:^|\s)-o\s+(\S+)`).FindStringSubmatch(goBuild)
	if out == nil {
		t.Fatalf("Dockerfile: the go build has no -o: %s", goBuild)
	}

	// GO_VERSION follows go.mod.
	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(goMod)
	argGo := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)`).FindSubmatch(mustRead(t, "../Dockerfile"))
	if goLine == nil || argGo == nil || string(argGo[1]) != string(goLine[1]) {
		t.Errorf("Dockerfile: ARG GO_VERSION=%s, go.mod says go %s", argGo, goLine)
	}

	// The final stage.
	switch {
	case strings.HasPrefix(final.from, "gcr.io/distroless/static") && strings.HasSuffix(final.from, ":nonroot"):
	case final.from == "scratch":
	default:
		t.Errorf("Dockerfile: final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot or scratch", final.from)
	}
	var copied string
	for _, in := range final.find("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 3 && f[0] == "--from="+build.name && f[1] == out[1] {
			copied = f[2]
		}
	}
	if copied == "" {
		t.Fatalf("Dockerfile: the final stage does not COPY --from=%s %s (the go build's -o)", build.name, out[1])
	}
	if ep := jsonForm(t, final, "ENTRYPOINT"); !slices.Equal(ep, []string{copied}) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want [%q] (the copied binary)", ep, copied)
	}
	if cmd := jsonForm(t, final, "CMD"); !slices.Equal(cmd, []string{"run"}) {
		t.Errorf("Dockerfile: CMD %q, want [\"run\"]", cmd)
	}
	users := final.find("USER")
	if len(users) == 0 {
		t.Errorf("Dockerfile: no USER in the final stage: want 65532 (distroless nonroot)")
	} else if u, _, _ := strings.Cut(users[len(users)-1].args, ":"); u != "65532" && u != "nonroot" {
		t.Errorf("Dockerfile: USER %s, want 65532", users[len(users)-1].args)
	}

	// The ports it documents are the binary's defaults.
	cl := adstapCLI(t)
	var exposed []string
	for _, in := range final.find("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	for _, flag := range []string{"listen", "admin"} {
		def := cl.flags[flag].def
		port := def[strings.LastIndex(def, ":")+1:]
		if !slices.Contains(exposed, port) {
			t.Errorf("Dockerfile: EXPOSE %v lacks %s, the default of --%s (%s)", exposed, port, flag, def)
		}
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonForm is the exec form of the last ENTRYPOINT or CMD of a stage.
func jsonForm(t *testing.T, s stage, op string) []string {
	t.Helper()
	ins := s.find(op)
	if len(ins) == 0 {
		t.Errorf("Dockerfile: no %s in the final stage", op)
		return nil
	}
	var v []string
	if err := json.Unmarshal([]byte(ins[len(ins)-1].args), &v); err != nil {
		t.Errorf("Dockerfile: %s %s: want the exec form [\"...\"]: %v", op, ins[len(ins)-1].args, err)
	}
	return v
}

// TestDockerignoreKeepsSources: the build context keeps go.mod, go.sum and
// every package of the module that cmd/adstap is built from.
func TestDockerignoreKeepsSources(t *testing.T) {
	leakcheck.Check(t)
	var patterns []string
	for line := range strings.SplitSeq(string(mustRead(t, "../.dockerignore")), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			if strings.HasPrefix(line, "!") {
				t.Fatalf(".dockerignore: exceptions (%s) are not understood by this check", line)
			}
			patterns = append(patterns, strings.TrimPrefix(path.Clean(line), "/"))
		}
	}
	list := exec.Command(goTool(), "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "../cmd/adstap")
	outb, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for dir := range strings.FieldsSeq(string(outb)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				needed = append(needed, filepath.ToSlash(filepath.Join(rel, filepath.Base(f))))
			}
		}
	}
	if len(needed) < 5 {
		t.Fatalf("go list found only %v", needed)
	}
	for _, f := range needed {
		for _, p := range patterns {
			if ignored(p, f) {
				t.Errorf(".dockerignore: %s leaves out %s, which the image's build needs", p, f)
			}
		}
	}
}

// ignored reports whether a .dockerignore pattern excludes the file (a
// pattern matches the path or one of its parent directories; ** is any
// number of directories).
func ignored(pattern, file string) bool {
	parts := strings.Split(file, "/")
	for i := 1; i <= len(parts); i++ {
		p := strings.Join(parts[:i], "/")
		if ok, _ := path.Match(pattern, p); ok {
			return true
		}
		if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
			for j := range i {
				if ok, _ := path.Match(rest, strings.Join(parts[j:i], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// TestMakeImage: `make image` runs docker build with the version, the commit
// and the Dockerfile (make -n: no Docker engine needed).
func TestMakeImage(t *testing.T) {
	leakcheck.Check(t)
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	out, err := exec.Command(mk, "-C", "..", "-n", "--no-print-directory", "image",
		"VERSION=v9.9.9", "COMMIT=c0ffee", "IMAGE=example.test/adstap:v9.9.9", "DOCKER=docker").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v\n%s", err, out)
	}
	cmd := strings.Fields(strings.TrimSpace(string(out)))
	if len(cmd) < 3 || cmd[0] != "docker" || cmd[1] != "build" || cmd[len(cmd)-1] != "." {
		t.Fatalf("make -n image: %q, want docker build ... . (the repository as the context)", out)
	}
	for _, pair := range [][]string{{"-t", "example.test/adstap:v9.9.9"}, {"-f", "Dockerfile"}} {
		if !containsSeq(cmd, pair) {
			t.Errorf("make -n image: %q lacks %s", out, strings.Join(pair, " "))
		}
	}
	// A build arg for each variable the LDFLAGS (and so the Dockerfile's) read.
	given := map[string]string{"VERSION": "v9.9.9", "COMMIT": "c0ffee"}
	for _, v := range ldflagsVars(makeVar(t, "LDFLAGS")) {
		name, ok := strings.CutPrefix(v, "$(")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, ")")
		if !containsSeq(cmd, []string{"--build-arg", name + "=" + given[name]}) {
			t.Errorf("make -n image: %q lacks --build-arg %s=$(%s) (the Makefile's LDFLAGS use $(%s))", out, name, name, name)
		}
	}
	if repo := makeVar(t, "IMAGE_REPO"); strings.ContainsAny(repo, " \t") || strings.LastIndex(repo, ":") > strings.LastIndex(repo, "/") {
		t.Errorf("Makefile: IMAGE_REPO %q: want a repository, without a tag", repo)
	}
}

func containsSeq(s, seq []string) bool {
	for i := 0; i+len(seq) <= len(s); i++ {
		if slices.Equal(s[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

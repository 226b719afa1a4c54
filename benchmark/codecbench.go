package benchmark

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// CodecResult is the envelope decoder's micro-benchmark
// (codec.BenchmarkDecodeCDS10MB): a 10 MB SotW CDS response of 10,000
// clusters scanned, every resource named and hashed, on one core.
type CodecResult struct {
	Runs        int
	MBPerSec    float64 // median, MB/s (10^6 bytes)
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
	Resources   int
	Output      string
}

// codecResources is the number of resources in the benchmark's push.
const codecResources = 10_000

// RunCodecBench runs codec.BenchmarkDecodeCDS10MB count times on one core
// (GOMAXPROCS=1) with `go test` from dir, the module's root.
func RunCodecBench(goCmd, dir string, count int) (CodecResult, error) {
	cmd := exec.Command(goCmd, "test", "-run", "^$", "-bench", "^BenchmarkDecodeCDS10MB$", "-benchmem",
		"-cpu", "1", "-count", strconv.Itoa(count), "./codec/")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return CodecResult{Output: string(out)}, fmt.Errorf("go test -bench ./codec/: %v\n%s", err, out)
	}
	return parseCodecBench(out)
}

// parseCodecBench reads `go test -bench` output of BenchmarkDecodeCDS10MB.
func parseCodecBench(out []byte) (CodecResult, error) {
	r := CodecResult{Output: string(out), Resources: codecResources}
	var mbs, ns, bop, aop []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkDecodeCDS10MB") {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "MB/s":
				mbs = append(mbs, v)
			case "ns/op":
				ns = append(ns, v)
			case "B/op":
				bop = append(bop, v)
			case "allocs/op":
				aop = append(aop, v)
			}
		}
	}
	if len(mbs) == 0 {
		return r, fmt.Errorf("no BenchmarkDecodeCDS10MB result in:\n%s", out)
	}
	r.Runs = len(mbs)
	r.MBPerSec, r.NsPerOp, r.BytesPerOp, r.AllocsPerOp = median(mbs), median(ns), median(bop), median(aop)
	return r, nil
}

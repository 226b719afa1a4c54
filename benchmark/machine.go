package benchmark

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/internal/testutil/sidecar"
)

// Machine describes where a run happened.
type Machine struct {
	CPU       string
	Cores     int
	Memory    int64 // bytes
	Kernel    string
	GoVersion string
	Date      time.Time
	Commit    string
}

// ThisMachine describes this machine; commit is the source's, or "" to ask git.
func ThisMachine(commit string) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), Date: time.Now().UTC(), Commit: commit}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				m.Memory = sidecar.StatusKB([]byte(line))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if m.Commit == "" {
		if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
			m.Commit = strings.TrimSpace(string(out))
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
				m.Commit += " (with uncommitted changes)"
			}
		}
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH
	}
	return m
}

func (m Machine) String() string {
	mem := strconv.FormatFloat(float64(m.Memory)/(1<<30), 'f', 1, 64) + " GiB"
	return m.CPU + ", " + strconv.Itoa(m.Cores) + " cores, " + mem + " RAM, " + m.Kernel + ", " + m.GoVersion
}

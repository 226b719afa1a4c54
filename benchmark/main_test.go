package benchmark_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/benchmark"
)

// childEnv makes the test binary serve as a middle process (see TestChildProcess).
const childEnv = "ADSTAP_BENCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" && len(os.Args) > 1 {
		os.Exit(benchmark.ServeChild(os.Args[1], os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

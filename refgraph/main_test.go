package refgraph_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.RuntimeGoroutines) }

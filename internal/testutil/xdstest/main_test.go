package xdstest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/xdstest"
)

func TestMain(m *testing.M) {
	// The mtls-files case of TestXDSResolver leaks grpc-go's pemfile watcher
	// by design of grpc-go v1.85.0 (see xdstest.TLSChannelCreds); nothing
	// else in this package starts one.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction(xdstest.PemfileWatcherFunc))
}

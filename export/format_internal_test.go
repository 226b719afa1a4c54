package export

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestKnownShortTypesCoverCodec(t *testing.T) {
	leakcheck.Check(t)
	known := map[string]bool{}
	for _, s := range knownShortTypes {
		known[s] = true
	}
	for _, u := range []string{codec.TypeListener, codec.TypeRoute, codec.TypeCluster, codec.TypeEndpoint, codec.TypeSecret,
		codec.TypeExtensionConfig, codec.TypeScopedRoute, codec.TypeVirtualHost, codec.TypeRuntime, codec.TypeNameTable,
		codec.TypeProxyConfig, codec.TypeHealthInfo, codec.TypeSyncz, "type.googleapis.com/my.Unknown"} {
		if s := codec.ShortType(u); !known[s] {
			t.Errorf("codec.ShortType(%s) = %q, missing from knownShortTypes", u, s)
		}
	}
}

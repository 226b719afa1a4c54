// Package demo runs a small mesh on loopback for `adstap demo`: a go-control-plane server, a grpc-go xDS client and a Delta client, with configuration that changes, breaks and heals.
package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/controlplane"
)

// ControlPlane is a go-control-plane server with a snapshot cache, standing in
// for istiod.
type ControlPlane struct{ *controlplane.ControlPlane }

// StartControlPlane serves ADS (SotW and Delta) on lis. nackPause slows its
// answer to a NACK: go-control-plane's snapshot cache re-sends a rejected
// snapshot at once, which on loopback makes thousands of NACKs a second; at a
// slower pace the demo shows a storm a person can read.
func StartControlPlane(ctx context.Context, lis net.Listener, log *slog.Logger, nackPause time.Duration) *ControlPlane {
	pause := func(nack bool) {
		if nack {
			select {
			case <-time.After(nackPause):
			case <-ctx.Done():
			}
		}
	}
	// Like istiod, the control plane names itself in every response, which
	// adstap status shows as the replica serving each proxy. go-control-plane
	// hands the callback the stream's own response (it sets the nonce on it
	// the same way), so setting a field there is safe.
	self := &core.ControlPlane{Identifier: `{"Component":"demo-control-plane","ID":"demo-control-plane-0"}`}
	cb := server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			pause(r.GetErrorDetail() != nil)
			return nil
		},
		StreamDeltaRequestFunc: func(_ int64, r *discovery.DeltaDiscoveryRequest) error {
			pause(r.GetErrorDetail() != nil)
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			r.ControlPlane = self
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			r.ControlPlane = self
		},
	}
	return &ControlPlane{controlplane.Start(ctx, lis, controlplane.Config{
		Callbacks:     cb,
		Log:           cacheLog{log},
		ServerOptions: []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)},
		ServeFailed:   func(err error) { log.Error("demo control plane stopped", "err", err) },
	})}
}

// cacheLog shows go-control-plane's own log at debug level.
type cacheLog struct{ l *slog.Logger }

func (c cacheLog) Debugf(format string, args ...any) {
	c.l.Debug("demo control plane: " + fmt.Sprintf(format, args...))
}
func (c cacheLog) Infof(format string, args ...any) {
	c.l.Debug("demo control plane: " + fmt.Sprintf(format, args...))
}
func (c cacheLog) Warnf(format string, args ...any) {
	c.l.Debug("demo control plane: " + fmt.Sprintf(format, args...))
}
func (c cacheLog) Errorf(format string, args ...any) {
	c.l.Warn("demo control plane: " + fmt.Sprintf(format, args...))
}

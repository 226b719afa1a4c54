// Package xdstest is adstap's test support: real xDS peers on loopback (go-control-plane, grpc-go's xDS client), raw-frame peers, certificates, and waiting for a condition.
package xdstest

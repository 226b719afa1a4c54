// Package tap relays xDS gRPC streams byte for byte and hands every frame to an observer on the side.
package tap

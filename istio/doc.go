// Package istio checks adstap against Istio's own code: the sidecar injector,
// istiod's xDS engine, istio-agent and istio's ADS clients.
package istio

// Package mesh runs Istio's own xDS peers around an in-process adstap, for the compatibility tests: istiod's xDS engine upstream (with a record of every response it generated), istio's ADS clients and istio-agent downstream.
//
// The chain as deployed, each link Istio's own code:
//
//	adsc (SotW or Delta) ──▶ adstap (Tap) ──▶ istiod's engine (Engine)
//	adsc ──▶ istio-agent's XDS proxy (Agent, Envoy disabled, Unix socket) ──▶ adstap ──▶ istiod's engine
//
// A test starts an Engine, a Tap in front of it, and clients on the Tap (or
// an Agent on the Tap and clients on the Agent), changes the mesh through
// the Engine, and compares what the Engine says it pushed (Engine.Pushes)
// with what adstap reports: its live log (Tap.Log), /debug/streams
// (Tap.Streams), metrics (Tap.Metric), spans (Tap.Spans) and the tracker's
// events (Tap.Events).
package mesh

// Package mesh is the suite of many taps: real adstap processes, each with its own proxy and control plane, scraped by a real Prometheus and read back by adstap status --prometheus.
package mesh

// Package grafana builds adstap's Grafana dashboard (deploy/grafana/dashboard.json) and checks it against Prometheus's own PromQL parser and a real scrape of a running tap; a module of its own, so that Prometheus's dependencies stay out of adstap's.
package grafana

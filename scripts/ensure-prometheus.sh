#!/usr/bin/env bash
# ensure-prometheus.sh: the mesh suite (test/mesh) runs a real Prometheus
# server scraping many taps. Installs Debian's prometheus package (the server
# and promtool) when the server is missing and apt-get can run (root, or
# passwordless sudo). PROMETHEUS=/path/to/prometheus picks one. Without it
# the suite is skipped outside CI and fails in CI (CI set), so CI cannot pass
# without it.
set -u
. "$(dirname "$0")/apt-install.sh"
if [ -n "${PROMETHEUS:-}" ] && command -v "$PROMETHEUS" >/dev/null 2>&1; then
	exit 0
fi
if command -v prometheus >/dev/null 2>&1; then
	exit 0
fi
if apt_install prometheus "for the mesh suite" && command -v prometheus >/dev/null 2>&1; then
	exit 0
fi
missing_in_ci "Prometheus server" "the mesh suite (test/mesh)" "apt-get install -y --no-install-recommends prometheus"

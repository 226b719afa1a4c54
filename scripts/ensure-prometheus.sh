#!/usr/bin/env bash
# ensure-prometheus.sh: the mesh suite (test/mesh) runs a real Prometheus
# server scraping many taps. Installs Debian's prometheus package (the server
# and promtool) when the server is missing and apt-get can run (root, or
# passwordless sudo). PROMETHEUS=/path/to/prometheus picks one. Without it
# the suite is skipped outside CI and fails in CI (CI set), so CI cannot pass
# without it.
set -u
if [ -n "${PROMETHEUS:-}" ] && command -v "$PROMETHEUS" >/dev/null 2>&1; then
	exit 0
fi
if command -v prometheus >/dev/null 2>&1; then
	exit 0
fi
hint="apt-get install -y --no-install-recommends prometheus"
if command -v apt-get >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
		echo "make test: installing the Prometheus server for the mesh suite ($hint)"
		$sudo apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends prometheus >/dev/null &&
			command -v prometheus >/dev/null 2>&1 &&
			exit 0
		echo "make test: installing prometheus failed (output above)" >&2
	fi
fi
case "${CI:-}" in
"" | 0 | false)
	echo "make test: no Prometheus server, so the mesh suite (test/mesh) will be skipped; install it with: $hint" >&2
	exit 0
	;;
esac
echo "make test: no Prometheus server, and CI must run the mesh suite; install it with: $hint" >&2
exit 1

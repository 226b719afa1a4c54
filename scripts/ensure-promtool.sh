#!/usr/bin/env bash
# ensure-promtool.sh: make rules checks the alert rules with Prometheus's own
# promtool. Prints the promtool to use, finding or bringing one in this order:
# $PROMTOOL, promtool on the PATH, .cache/bin/promtool, Debian's prometheus
# package (when apt-get can run: root, or passwordless sudo), then a build
# from the Go module proxy into .cache/bin (a few minutes, once). Says what
# to do when none of them works.
set -u
cd "$(dirname "$0")/.."
. scripts/apt-install.sh
# github.com/prometheus/prometheus v0.42.0 is Prometheus 2.42.0, the promtool
# of Debian 12's prometheus package, which the rules' unit tests are written
# against (3.x extrapolates rates differently).
version=v0.42.0
cached=.cache/bin/promtool
say() { echo "make rules: $*" >&2; }

if [ -n "${PROMTOOL:-}" ] && command -v "$PROMTOOL" >/dev/null 2>&1; then
	command -v "$PROMTOOL"
	exit 0
fi
if command -v promtool >/dev/null 2>&1; then
	command -v promtool
	exit 0
fi
if [ -x "$cached" ]; then
	echo "$cached"
	exit 0
fi
if apt_install prometheus "(promtool, in Debian's prometheus package)" && command -v promtool >/dev/null 2>&1; then
	command -v promtool
	exit 0
fi
if command -v go >/dev/null 2>&1; then
	say "building promtool $version from the Go module proxy into $cached (a few minutes, once)"
	mkdir -p .cache/bin
	(
		n=0
		while sleep 1; do
			n=$((n + 1))
			[ $((n % 30)) -ne 0 ] || say "still building promtool (${n}s)..."
		done
	) </dev/null >/dev/null &
	beat=$!
	# Built in its own module (its go.mod has replace directives, which go
	# install pkg@version refuses).
	rc=1
	src=$(GOFLAGS= go mod download -json "github.com/prometheus/prometheus@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -n "$src" ]; then
		out="$PWD/$cached"
		(cd "$src" && GOWORK=off GOFLAGS=-mod=readonly go build -o "$out" ./cmd/promtool) >&2
		rc=$?
	fi
	kill "$beat" 2>/dev/null
	if [ $rc -eq 0 ] && [ -x "$cached" ]; then
		echo "$cached"
		exit 0
	fi
	say "building promtool failed (exit $rc, output above)"
fi
say "no promtool: install Prometheus's promtool (Debian/Ubuntu: apt-get install prometheus), or set PROMTOOL=/path/to/promtool"
exit 1

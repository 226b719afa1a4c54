#!/usr/bin/env bash
# Builds Jaeger v2 (all-in-one) from the Go module proxy into .cache/bin/jaeger,
# a git-ignored folder, for the tests that check spans in a real Jaeger.
# Nothing fetched is committed: the scratch module lives in .cache too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.cache/bin/jaeger"
version=v1.76.0
if [ -x "$out" ] && [ "$(cat "$out.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
work="$root/.cache/jaeger-build"
mkdir -p "$work" "$(dirname "$out")"
cd "$work"
[ -f go.mod ] || go mod init adstap.local/jaegerbuild >/dev/null 2>&1
# Jaeger's graph names a sarama release the proxy no longer serves whole.
go mod edit -replace github.com/Shopify/sarama=github.com/Shopify/sarama@v1.33.0
echo "building Jaeger $version (a few minutes, once)..." >&2
GOFLAGS=-mod=mod go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$version"
GOFLAGS=-mod=mod go build -o "$out" github.com/jaegertracing/jaeger/cmd/jaeger
echo "$version" > "$out.version"

#!/usr/bin/env bash
# heartbeat.sh LABEL CMD...: runs CMD and, while it runs, prints a line every
# 30 s, so a long silent Go build (Jaeger, Istio's tree) shows it is alive.
set -u
label=$1; shift
( n=0; while sleep 1 </dev/null >/dev/null 2>&1; do n=$((n+1)); [ $((n % 30)) -ne 0 ] || echo "$label: still running (${n}s)..."; done ) & beat=$!
"$@"; rc=$?
kill "$beat" 2>/dev/null
exit $rc

#!/usr/bin/env bash
# make bench-compare BASE=<commit>: builds the base commit's adstap and this
# tree's, both as `make build` does (static, -trimpath), and the harness, then
# runs `adstap-bench compare` on them (docs/performance.md). The base's source
# is exported with git archive into .cache/bench-compare (no worktree is
# registered), and its binary is kept there for the next run.
set -euo pipefail
base=${1:?usage: bench-compare.sh <commit> [adstap-bench compare flags]}
shift
go=${GO:-go}
sha=$(git rev-parse --short=12 "${base}^{commit}")
head=$(git describe --tags --always --dirty 2>/dev/null || git rev-parse --short=12 HEAD)
dir=.cache/bench-compare
mkdir -p "$dir"
if [ ! -x "$dir/adstap-$sha" ]; then
	echo "bench-compare: building adstap at $sha (base)" >&2
	rm -rf "$dir/src-$sha" && mkdir -p "$dir/src-$sha"
	git archive "$sha" | tar -x -C "$dir/src-$sha"
	(cd "$dir/src-$sha" && CGO_ENABLED=0 "$go" build -trimpath -o "../adstap-$sha" ./cmd/adstap)
	rm -rf "$dir/src-$sha"
fi
echo "bench-compare: building adstap at $head (head) and the harness" >&2
CGO_ENABLED=0 "$go" build -trimpath -o "$dir/adstap-head" ./cmd/adstap
"$go" build -o .cache/bin/adstap-bench ./benchmark/cmd/adstap-bench
exec .cache/bin/adstap-bench compare -head "$dir/adstap-head" -head-name "$head" -base "$dir/adstap-$sha" -base-name "$sha" "$@"

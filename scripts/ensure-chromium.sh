#!/usr/bin/env bash
# ensure-chromium.sh: the live page's test drives a real headless chromium
# (cmd/adstap TestLivePageInARealBrowser). Installs Debian's chromium package
# when it is missing and apt-get can run (root, or passwordless sudo).
# Without it the test is skipped outside CI and fails in CI (CI set), so CI
# cannot pass without the browser check.
set -u
for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done
if [ -n "${ADSTAP_CHROMIUM:-}" ]; then
	exit 0
fi
hint="apt-get install -y --no-install-recommends chromium"
if command -v apt-get >/dev/null 2>&1; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		fi
	fi
	if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
		echo "make test: installing chromium for the live page's browser test ($hint)"
		$sudo apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends chromium >/dev/null &&
			exit 0
		echo "make test: installing chromium failed (output above)" >&2
	fi
fi
case "${CI:-}" in
"" | 0 | false)
	echo "make test: no chromium, so the live page's browser test will be skipped; install it with: $hint" >&2
	exit 0
	;;
esac
echo "make test: no chromium, and CI must run the live page's browser test; install it with: $hint" >&2
exit 1

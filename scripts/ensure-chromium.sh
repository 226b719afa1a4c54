#!/usr/bin/env bash
# ensure-chromium.sh: the live page's test drives a real headless chromium
# (cmd/adstap TestLivePageInARealBrowser). Installs Debian's chromium package
# when it is missing and apt-get can run (root, or passwordless sudo).
# Without it the test is skipped outside CI and fails in CI (CI set), so CI
# cannot pass without the browser check.
set -u
. "$(dirname "$0")/apt-install.sh"
for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done
if [ -n "${ADSTAP_CHROMIUM:-}" ]; then
	exit 0
fi
if apt_install chromium "for the live page's browser test"; then
	exit 0
fi
missing_in_ci "chromium" "the live page's browser test" "apt-get install -y --no-install-recommends chromium"

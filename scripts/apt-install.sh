#!/usr/bin/env bash
# apt-install.sh: sourced by the ensure-*.sh scripts. apt_install PACKAGE
# WHY installs one Debian package when apt-get can run (root, or
# passwordless sudo), saying so on standard error; it fails, with nothing
# said, when apt-get cannot run, and says so when the install fails.
apt_install() {
	local package=$1 why=$2 sudo=""
	command -v apt-get >/dev/null 2>&1 || return 1
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		else
			return 1
		fi
	fi
	echo "make: installing $package $why (apt-get install -y --no-install-recommends $package)" >&2
	if $sudo apt-get update -qq >&2 &&
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "$package" >/dev/null 2>&1; then
		return 0
	fi
	echo "make: installing $package failed" >&2
	return 1
}

# missing_in_ci WHAT SKIPPED HINT: outside CI, says what will be skipped and
# exits 0; in CI (CI set), says it must not be and exits 1.
missing_in_ci() {
	case "${CI:-}" in
	"" | 0 | false)
		echo "make test: no $1, so $2 will be skipped; install it with: $3" >&2
		exit 0
		;;
	esac
	echo "make test: no $1, and CI must run $2; install it with: $3" >&2
	exit 1
}

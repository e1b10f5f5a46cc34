#!/usr/bin/env bash
# make base-image: a Python 3.11 Debian bookworm base image built from Debian's packages (mmdebstrap), for hosts
# that reach no image registry. It stands in for python:3.11.13-slim-bookworm: the Dockerfiles build on it unchanged
# (make images BASE_IMAGE=<tag>). Differences from the official image are listed in the README ("Images").
#   usage: images/base/build.sh TAG ENGINE [MIRROR] [SECURITY_MIRROR]
set -euo pipefail
tag=${1:?usage: build.sh TAG ENGINE [MIRROR] [SECURITY_MIRROR]}
engine=${2:?usage: build.sh TAG ENGINE [MIRROR] [SECURITY_MIRROR]}
mirror=${3:-http://deb.debian.org/debian}
security=${4:-http://deb.debian.org/debian-security}

command -v mmdebstrap >/dev/null 2>&1 || {
	echo "error: mmdebstrap not found: apt-get install mmdebstrap (or make images-engine)" >&2
	exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Run inside the new root: `python` and pip in /usr/local as the official image has them (pip and setuptools from
# Debian's own wheels, offline), and no EXTERNALLY-MANAGED marker (the official image has none, and the Dockerfiles'
# final stage runs `python -m pip uninstall`).
cat >"$work/customize.sh" <<'HOOK'
set -eu
ln -s /usr/bin/python3 /usr/local/bin/python
rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED
set -- /usr/share/python-wheels/pip-*.whl
python3 "$1/pip" install --quiet --no-index --no-cache-dir --find-links /usr/share/python-wheels pip setuptools
python -m pip --version
python -m venv /tmp/venv-check && rm -rf /tmp/venv-check
HOOK

# minbase (Priority: required + apt) has useradd/groupadd, which the Dockerfiles' final stage runs; merged /usr set up
# by the hook (usr-is-merged), not by the usrmerge package, which brings perl (~50 MB). Docs, man pages
# and locales are left out, as in the official slim image.
mmdebstrap --quiet --mode=root --variant=minbase --format=tar \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--include=python3,python3-venv,python3-pip-whl,python3-setuptools-whl,ca-certificates \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--customize-hook="cp '$work/customize.sh' \"\$1/tmp/\" && env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin chroot \"\$1\" sh /tmp/customize.sh && rm \"\$1/tmp/customize.sh\"" \
	--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/* "$1"/root/.cache' \
	bookworm "$work/rootfs.tar" \
	"deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb $security bookworm-security main"

"$engine" import \
	--change "LABEL dev.surreal.base-script=$(sha256sum "$0" | cut -c1-12)" \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'CMD ["python3"]' \
	"$work/rootfs.tar" "$tag" >/dev/null
"$engine" run --rm "$tag" python -c "import sys, ssl, venv, ensurepip; assert sys.version_info[:2] == (3, 11), sys.version; print('base image', sys.version.split()[0])"

#!/usr/bin/env bash
# make base-image: a Python 3.11 Debian bookworm base image built from Debian's packages (mmdebstrap), for hosts
# that reach no image registry. It stands in for python:3.11.13-slim-bookworm: the Dockerfiles build on it unchanged
# (make images BASE_IMAGE=<tag>). Differences from the official image are listed in docs/images.md.
#   usage: images/base/build.sh TAG ENGINE [MIRROR] [SECURITY_MIRROR]
# MIRROR and SECURITY_MIRROR default to the mirrors the host's own apt sources use for bookworm and
# bookworm-security, so the build goes wherever this machine's apt goes.
set -euo pipefail
usage="usage: build.sh TAG ENGINE [MIRROR] [SECURITY_MIRROR]"
tag=${1:?$usage}
engine=${2:?$usage}

# The first URI that the host's apt sources (one-line .list and deb822 .sources files) give for SUITE.
host_mirror() {
	local suite=$1
	{
		cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk -v suite="$suite" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) print $i }'
		for file in /etc/apt/sources.list.d/*.sources; do
			[ -e "$file" ] || continue
			awk -v suite="$suite" -v RS= '{
				uri = ""; deb = 0; hit = 0; n = split($0, lines, "\n")
				for (j = 1; j <= n; j++) {
					k = split(lines[j], f, /[ \t]+/)
					if (f[1] == "Types:") for (m = 2; m <= k; m++) if (f[m] == "deb") deb = 1
					if (f[1] == "URIs:") uri = f[2]
					if (f[1] == "Suites:") for (m = 2; m <= k; m++) if (f[m] == suite) hit = 1
				}
				if (deb && hit && uri != "") print uri
			}' "$file"
		done
	} | head -n 1
}
mirror=${3:-$(host_mirror bookworm)}
security=${4:-$(host_mirror bookworm-security)}
if [ -z "$mirror" ] || [ -z "$security" ]; then
	echo "error: the host's apt sources name no mirror for bookworm and bookworm-security:" \
		"pass them (make base-image DEBIAN_MIRROR=... DEBIAN_SECURITY_MIRROR=...)" >&2
	exit 1
fi
echo "Debian mirrors: $mirror (bookworm), $security (bookworm-security)"

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

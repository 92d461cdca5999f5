#!/bin/sh
# build-busybox.sh OUT: a static busybox from Debian's source package of
# busybox (the upstream tarball and Debian's packaging, pinned by version
# and SHA-256, from deb.debian.org), with Debian's patches except the one
# that reverts upstream's ash keeping environment variables whose names are
# not shell identifiers (the images the Kubernetes tests expect keep them),
# configured as upstream's busybox image (docker.io/library/busybox) is:
# busybox's defconfig with that image's few changes, static. Debian's own
# busybox-static configuration leaves out applets and options the tests and
# users run (wget -T, which then writes through a null pointer and crashes;
# nc -z; nohup, pgrep, find -delete, ...). Two changes of ours: bash is ash,
# as the tests run /bin/bash where upstream's agnhost has it, and the shell
# finds commands through PATH before its own applets (upstream's default,
# checked below), so an image's curl or nc wins over busybox's.
# Reproducible: the build tag and timestamps are fixed.
set -eu

out=$1
case $out in /*) ;; *) out=$PWD/$out ;; esac
version=1.35.0
debian=4
pool=http://deb.debian.org/debian/pool/main/b/busybox
orig_sha256=faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694
debian_sha256=d611281ea49cfac240a5dfdb0de6f440138e3345490e087d8e39b7434a6bd819
patches="shell-ash-export-HOME.patch version.patch init-console.patch
stop-checking-ancient-kernel-version.patch install-readlink-in-bin.patch
spelling.diff platform-linux.diff"
# Set over defconfig: upstream's image's (ar, and UTF-8 passed through
# undecoded) and ours (static; bash is ash).
set_config="CONFIG_STATIC=y CONFIG_AR=y CONFIG_FEATURE_AR_CREATE=y
CONFIG_FEATURE_AR_LONG_FILENAMES=y CONFIG_LAST_SUPPORTED_WCHAR=0
CONFIG_BASH_IS_ASH=y"
# Unset: upstream's image's, and the choices bash-is-ash replaces; the
# shell's applets-first lookup, which defconfig already leaves out.
unset_config="CONFIG_FEATURE_SYNC_FANCY CONFIG_BASH_IS_NONE
CONFIG_FEATURE_SH_STANDALONE CONFIG_FEATURE_PREFER_APPLETS"
# What the images must have, checked in the final configuration: the
# options whose absence broke common commands.
want_config="CONFIG_WGET=y CONFIG_FEATURE_WGET_TIMEOUT=y
CONFIG_FEATURE_WGET_LONG_OPTIONS=y CONFIG_NSLOOKUP=y CONFIG_NC=y
CONFIG_NC_110_COMPAT=y CONFIG_PING=y CONFIG_ASH=y"

missing=
for tool in gcc make patch bzip2 xz curl; do
	command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || missing="$missing libc6-dev"
if [ -n "$missing" ]; then
	echo "build-busybox: installing$missing"
	pkgs=$(echo "$missing" | sed 's/\bxz\b/xz-utils/')
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs ||
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
curl -fsS -o orig.tar.bz2 "$pool/busybox_$version.orig.tar.bz2"
curl -fsS -o debian.tar.xz "$pool/busybox_$version-$debian.debian.tar.xz"
echo "$orig_sha256  orig.tar.bz2" | sha256sum -c --quiet
echo "$debian_sha256  debian.tar.xz" | sha256sum -c --quiet
tar -xjf orig.tar.bz2
tar -xJf debian.tar.xz
cd "busybox-$version"
for p in $patches; do
	patch -p1 -s < "../debian/patches/$p"
done

export SOURCE_DATE_EPOCH=0
make defconfig >config.log 2>&1 || { tail -20 config.log; exit 1; }
for c in $unset_config; do
	sed -i "s/^$c=.*/# $c is not set/" .config
done
for cv in $set_config; do
	c=${cv%%=*}
	sed -i -e "s/^$c=.*/$cv/" -e "s/^# $c is not set\$/$cv/" .config
	grep -qx "$cv" .config || echo "$cv" >> .config
done
yes "" | make oldconfig >>config.log 2>&1 || { tail -20 config.log; exit 1; }
for c in $unset_config; do
	if grep -q "^$c=" .config; then
		echo "build-busybox: $c is still set" >&2
		exit 1
	fi
done
for cv in $set_config $want_config; do
	if ! grep -qx "$cv" .config; then
		echo "build-busybox: the configuration lacks $cv" >&2
		exit 1
	fi
done
make -j"$(nproc)" BB_EXTRA_VERSION="Debian $version-$debian source" >build.log 2>&1 ||
	{ tail -40 build.log; exit 1; }
mkdir -p "$(dirname "$out")"
cp busybox "$out.tmp"
mv "$out.tmp" "$out"

#!/bin/sh
# build-busybox.sh OUT: a static busybox from Debian's source package of
# busybox (the upstream tarball and Debian's packaging, pinned by version
# and SHA-256, from deb.debian.org), configured as Debian's busybox-static
# and with Debian's patches, except the one that reverts upstream's ash
# keeping environment variables whose names are not shell identifiers
# (the images the Kubernetes tests expect keep them), and with the shell
# finding commands through PATH before its own applets, as upstream's
# default (so an image's curl or nc wins over busybox's), and with bash as
# ash, as the tests run /bin/bash where upstream's agnhost has it. Reproducible:
# the build tag is fixed.
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
sed -e 's/^CONFIG_FEATURE_SH_STANDALONE=y/# CONFIG_FEATURE_SH_STANDALONE is not set/' \
	-e 's/^CONFIG_FEATURE_PREFER_APPLETS=y/# CONFIG_FEATURE_PREFER_APPLETS is not set/' \
	-e 's/^# CONFIG_BASH_IS_ASH is not set/CONFIG_BASH_IS_ASH=y/' \
	-e 's/^CONFIG_BASH_IS_NONE=y/# CONFIG_BASH_IS_NONE is not set/' \
	../debian/config/pkg/static > .config
yes "" | make oldconfig >/dev/null 2>&1
SOURCE_DATE_EPOCH=0 make -j"$(nproc)" BB_EXTRA_VERSION="Debian $version-$debian source" >build.log 2>&1 ||
	{ tail -40 build.log; exit 1; }
mkdir -p "$(dirname "$out")"
cp busybox "$out.tmp"
mv "$out.tmp" "$out"

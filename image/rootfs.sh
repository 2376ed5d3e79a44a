#!/bin/sh
# Writes the root filesystem of Tideway's image, without the tideway binary, into DIR, and the
# Debian packages it holds into PACKAGES (one "name version architecture source" per line).
#   image/rootfs.sh DIR PACKAGES [ARCH] [MIRROR]
# Needs mmdebstrap and root. Packages are only unpacked (mmdebstrap's extract variant: no
# maintainer scripts, no dpkg database); the list is image/packages. With SOURCE_DATE_EPOCH set
# and the same mirror, two runs write the same files.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=$1 packages=$2 arch=${3:-$(dpkg --print-architecture)}
mirror=${4:-http://deb.debian.org/debian}
include=$(grep -v '^#' "$here/packages" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

rm -rf "$dir"
# Unpacked only for other packages' maintainer scripts, which never run here: left out whole
# (their files removed, and they are not listed).
leave_out="dpkg tar debconf debianutils libdb5.3"
lists=$(mktemp -d)
trap 'rm -rf "$lists"' EXIT
TIDEWAY_LISTS=$lists TIDEWAY_LEAVE_OUT=$leave_out mmdebstrap --quiet --variant=extract --architectures="$arch" \
    --include="$include" \
    --extract-hook='for d in "$1"/var/cache/apt/archives/*.deb; do
        p=$(dpkg-deb --show --showformat="\${Package}" "$d")
        case " $TIDEWAY_LEAVE_OUT " in
        *" $p "*) dpkg-deb --fsys-tarfile "$d" | tar -t >"$TIDEWAY_LISTS/$p.files" ;;
        *) dpkg-deb --show --showformat="\${Package} \${Version} \${Architecture} \${source:Package}\n" "$d" >>"$TIDEWAY_LISTS/packages" ;;
        esac
      done' \
    --format=directory bookworm "$dir" "$mirror"
LC_ALL=C sort "$lists/packages" >"$packages"
cat "$lists"/*.files | sed 's|^\./||' | while IFS= read -r f; do
    [ -d "$dir/$f" ] && [ ! -L "$dir/$f" ] || rm -f "$dir/$f"
done
# iproute2's tools besides ip, ss and bridge (arpd is what needed libdb5.3).
rm -f "$dir/sbin/tc" "$dir/sbin/devlink" "$dir/sbin/rdma" "$dir/sbin/dcb" "$dir/sbin/vdpa" "$dir/sbin/tipc" \
    "$dir/sbin/genl" "$dir/usr/sbin/arpd" "$dir/sbin/rtmon" "$dir/sbin/ctstat" "$dir/sbin/lnstat" "$dir/sbin/nstat" \
    "$dir/sbin/rtacct" "$dir/sbin/rtstat" "$dir/sbin/routel" "$dir/sbin/ifstat" "$dir/sbin/routef" \
    "$dir/usr/bin/rdma" "$dir/usr/bin/ctstat" "$dir/usr/bin/lnstat" "$dir/usr/bin/nstat" "$dir/usr/bin/routel" \
    "$dir/usr/bin/rtstat"
rm -rf "$dir"/usr/lib/*/tc

# What a container never reads: manuals, translations, apt's and dpkg's state. Each package's
# copyright file stays (its licence travels with it).
find "$dir/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$dir/usr/share/man" "$dir/usr/share/info" "$dir/usr/share/locale" "$dir/usr/share/lintian" \
    "$dir/usr/share/bug" "$dir/var/cache/apt" "$dir/var/lib/apt" "$dir/var/log"/* "$dir/etc/apt" \
    "$dir/usr/lib/x86_64-linux-gnu/gconv" "$dir/usr/lib/aarch64-linux-gnu/gconv"

# Users (root; nonroot 65532 for DNS and the operator) and the iptables wrapper.
cp -a "$here/overlay/." "$dir/"
chmod 0644 "$dir/etc/passwd" "$dir/etc/group"
chmod 0755 "$dir/usr/sbin/iptables-wrapper"
for t in iptables ip6tables; do
    for s in "" -save -restore; do ln -sf iptables-wrapper "$dir/usr/sbin/$t$s"; done
done
# /bin/sh: dash (its alternatives link is made by a maintainer script, which did not run).
ln -sf dash "$dir/bin/sh"
mkdir -p "$dir/run" "$dir/root" "$dir/proc" "$dir/sys"
rmdir "$dir/var/run" 2>/dev/null || true
ln -sfn /run "$dir/var/run"
chmod 1777 "$dir/tmp"

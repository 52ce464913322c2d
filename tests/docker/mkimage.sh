#!/usr/bin/env bash
# Build the test image of the Docker provider's tests from files on this machine (nothing can be
# pulled from a registry here): busybox-static for the utilities, Debian's python3 with its
# standard library (the coding example runs unittest), and an /etc with root and nobody.
# usage: mkimage.sh SOCKET TAG   (imports through the Engine API of the daemon at SOCKET)
set -euo pipefail
sock=$1 tag=$2
bb=$(command -v busybox || echo /bin/busybox)
py=/usr/bin/python3.11
[ -x "$bb" ] || { echo "mkimage: busybox not found (apt-get install busybox-static)" >&2; exit 1; }
[ -x "$py" ] || { echo "mkimage: $py not found (apt-get install python3)" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/lib,etc,tmp,workspace,root,lib64} "$root/lib/x86_64-linux-gnu"
chmod 1777 "$root/tmp"
cp "$bb" "$root/bin/busybox"
for a in $("$bb" --list); do
    [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
done
cp "$py" "$root/usr/bin/python3.11"
ln -s python3.11 "$root/usr/bin/python3"
for lib in $(ldd "$py" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# the stdlib without caches and test suites (about 40 MB)
tar -C / --exclude='__pycache__' --exclude='python3.11/test' --exclude='python3.11/idlelib' \
    --exclude='python3.11/tkinter' --exclude='python3.11/ensurepip' -cf - usr/lib/python3.11 |
    tar -C "$root" -xf -
for lib in $(ldd /usr/lib/python3.11/lib-dynload/*.so 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
repo=${tag%:*} ver=${tag##*:}
[ "$repo" != "$tag" ] || ver=latest
tar -C "$root" -cf - . |
    curl -sf --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' --data-binary @- \
        "http://d/v1.41/images/create?fromSrc=-&repo=$repo&tag=$ver" >/dev/null
# podman ignores repo/tag on import: tag the newest image explicitly
id=$(curl -sf --unix-socket "$sock" "http://d/v1.41/images/json" |
    python3 -c 'import json,sys; i=sorted(json.load(sys.stdin), key=lambda x: -x["Created"]); print(i[0]["Id"])')
curl -sf --unix-socket "$sock" -X POST "http://d/v1.41/images/$id/tag?repo=$repo&tag=$ver" >/dev/null
echo "$tag"

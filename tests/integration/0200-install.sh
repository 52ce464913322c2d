#!/usr/bin/env bash
# sbx installs as users of C libraries expect: `meson install` (into a DESTDIR, as packagers do)
# puts the headers, libsbx.so with its soname, libsbx.pc, sbx and sbx-supervisor in place; a
# program built with `pkg-config --cflags --libs libsbx` against that tree runs a sandbox and an
# agent, finding the supervisor without SBX_SUPERVISOR; the same program against the build tree.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
: "${SBX_BUILDDIR:?SBX_BUILDDIR must name the build directory}"
for tool in meson cc pkg-config readelf; do
    command -v "$tool" >/dev/null || { not_ok "'$tool' is installed (scripts/deps.txt)"; done_testing; }
done

DEST="$T/dest"
run meson install -C "$SBX_BUILDDIR" --no-rebuild --quiet --destdir "$DEST"
expect_rc 0 "meson install into a DESTDIR succeeds"
prefix=$(meson introspect "$SBX_BUILDDIR" --buildoptions | python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o["prefix"], o["libdir"], o["libexecdir"], o["bindir"], o["includedir"], o["b_sanitize"])')
read -r PREFIX LIBDIR LIBEXECDIR BINDIR INCDIR SANITIZE <<<"$prefix"
# A library built with sanitizers needs their runtime in the program too.
CFLAGS_SAN=
[ "$SANITIZE" = none ] || CFLAGS_SAN="-fsanitize=$SANITIZE"
ROOT="$DEST$PREFIX"
case $LIBDIR in /*) LIB="$DEST$LIBDIR" ;; *) LIB="$ROOT/$LIBDIR" ;; esac

for f in "$INCDIR/sbx/session.h" "$INCDIR/sbx/capability.h" "$BINDIR/sbx" "$LIBEXECDIR/sbx-supervisor"; do
    if [ -e "$ROOT/$f" ]; then ok "installed: $f"; else not_ok "installed: $f"; fi
done
so=$(ls "$LIB"/libsbx.so.*.*.* 2>/dev/null | head -n1)
if [ -n "$so" ]; then ok "installed: the shared library"; else not_ok "installed: the shared library"; diag "$(ls -R "$ROOT")"; fi
expect_eq "$(readelf -d "$so" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" "libsbx.so.0" \
    "libsbx.so has the soname libsbx.so.0"
[ -L "$LIB/libsbx.so" ] && ok "the development link libsbx.so is there" || not_ok "the development link libsbx.so is there"
PC="$LIB/pkgconfig/libsbx.pc"
[ -f "$PC" ] && ok "libsbx.pc is installed" || not_ok "libsbx.pc is installed"

# Build the example against the installed tree only: pkg-config with the tree's prefix, no
# source or build directory on the include or library path.
pc() { PKG_CONFIG_PATH="$LIB/pkgconfig" pkg-config --define-variable=prefix="$ROOT" "$@" libsbx; }
run cc $CFLAGS_SAN -o "$T/hello" "$SBX_SRCDIR/examples/c-api/hello-sandbox.c" $(pc --cflags) $(pc --libs)
expect_rc 0 "the example builds with pkg-config --cflags --libs libsbx"
expect_not_in "$T/err" "warning" "without warnings"
expect_eq "$(pc --cflags | grep -c "$SBX_SRCDIR\|$SBX_BUILDDIR")" 0 "the flags name only the installed tree"

# Run it from anywhere with the installed library and no SBX_SUPERVISOR.
mkdir -p "$T/elsewhere"
cd "$T/elsewhere" || exit 1
unset SBX_SUPERVISOR
run env LD_LIBRARY_PATH="$LIB" "$T/hello"
expect_rc 0 "the program runs a sandbox with the installed library"
expect_in "$T/out" "hello from the workspace" "and reads the manifest's file in it"
expect_eq "$(env LD_LIBRARY_PATH="$LIB" ldd "$T/hello" | grep -c "$LIB/libsbx.so.0")" 1 "it uses the installed libsbx.so"

# From the build tree, as the guide says: the uninstalled libsbx.pc and the supervisor found
# next to libsbx.so.
cd "$T" || exit 1
run cc $CFLAGS_SAN -o "$T/hello-build" "$SBX_SRCDIR/examples/c-api/hello-sandbox.c" \
    $(PKG_CONFIG_PATH="$SBX_BUILDDIR/meson-uninstalled" pkg-config --cflags --libs libsbx)
expect_rc 0 "the example builds against the build tree"
cd "$T/elsewhere" || exit 1
run env LD_LIBRARY_PATH="$SBX_BUILDDIR" "$T/hello-build"
expect_rc 0 "and runs a sandbox from it without SBX_SUPERVISOR"
expect_in "$T/out" "hello from the workspace" "reading the manifest's file"

EX="$SBX_SRCDIR/examples/coding-task"
run env LD_LIBRARY_PATH="$LIB" "$T/hello" "$EX/agent.yaml" "replay:$EX/run.jsonl" "Do the task in TASK.md."
expect_rc 0 "the program runs the coding agent offline"
expect_in "$T/out" "passes all 3" "and prints its answer"
expect_eq "$(ls "$RUNBASE" 2>/dev/null | wc -l)" 0 "its sandboxes are gone at the end"
done_testing

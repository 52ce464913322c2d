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
# Where the built library looks last: the configured libexecdir and bindir.
sbx_libexecdir() { case $LIBEXECDIR in /*) echo "$LIBEXECDIR" ;; *) echo "$PREFIX/$LIBEXECDIR" ;; esac; }
sbx_bindir() { case $BINDIR in /*) echo "$BINDIR" ;; *) echo "$PREFIX/$BINDIR" ;; esac; }
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

# The README's build-tree block run as written (a relative LD_LIBRARY_PATH=build), from a
# directory laid out as a checkout whose build/ is this build directory: the library finds the
# supervisor next to its own real path.
CO=$T/checkout
mkdir -p "$CO"
ln -s "$SBX_BUILDDIR" "$CO/build"
ln -s "$SBX_SRCDIR/examples" "$CO/examples"
BLOCK=$(python3 - "$SBX_SRCDIR/examples/c-api/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
at = text.index("Against the build tree")
m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
print(m.group(1))
PY
)
expect_in <(printf '%s\n' "$BLOCK") "LD_LIBRARY_PATH=build" "the README's block uses a relative LD_LIBRARY_PATH"
[ -z "$CFLAGS_SAN" ] || BLOCK=$(printf '%s\n' "$BLOCK" | sed "s/^cc /cc $CFLAGS_SAN /")
cd "$CO" || exit 1
run bash -e -o pipefail -c "$BLOCK"
expect_rc 0 "the README's build-tree block runs as written"
expect_in "$T/out" "hello from the workspace" "its sandbox reads the manifest's file"
expect_in "$T/out" "passes all 3" "and its agent answers"
# A library with no supervisor near it (nor installed): the error names the supervisor program.
if [ ! -e "$(sbx_libexecdir)/sbx-supervisor" ] && [ ! -e "$(sbx_bindir)/sbx" ]; then
    mkdir -p "$T/lonely"
    cp -L "$SBX_BUILDDIR/libsbx.so.0" "$T/lonely/libsbx.so.0"
    run env LD_LIBRARY_PATH="$T/lonely" "$CO/hello-sandbox"
    expect_rc 1 "a library with no supervisor near it fails"
    expect_in "$T/err" "cannot find the supervisor program 'sbx-supervisor'" "naming the supervisor program"
    expect_in "$T/err" "SBX_SUPERVISOR" "and how to name it"
    expect_not_in "$T/err" "bin/sbx'" "not the sbx binary"
else
    ok "# SKIP an installed sbx-supervisor or sbx would be found"
fi
cd "$T" || exit 1

EX="$SBX_SRCDIR/examples/coding-task"
run env LD_LIBRARY_PATH="$LIB" "$T/hello" "$EX/agent.yaml" "replay:$EX/run.jsonl" "Do the task in TASK.md."
expect_rc 0 "the program runs the coding agent offline"
expect_in "$T/out" "passes all 3" "and prints its answer"
expect_eq "$(ls "$RUNBASE" 2>/dev/null | wc -l)" 0 "its sandboxes are gone at the end"
done_testing

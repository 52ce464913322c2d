#!/usr/bin/env bash
# Issue 27: a snapshot that failed (no space, or killed) left its blobs and temp files in the
# store, so a full store stayed full and every later snapshot failed too. Now a failed take
# removes what it wrote and collects the store; `sbx snapshot gc` removes what no snapshot uses
# (blobs of killed takes, temp files); the no-space message says how much is needed, how much
# is free and what can be freed. As root the store is also put on a 10 MB tmpfs for a real
# ENOSPC.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 reads the store"

mnt=
failed_cleanup() {
    local id
    for id in $(ls "$RUNBASE" 2>/dev/null); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    [ -n "$mnt" ] && umount -l "$mnt" 2>/dev/null
    sandbox_cleanup
}
trap failed_cleanup EXIT

# unused STORE: "<temp files> <blobs no tree names>" in a store.
unused() {
    python3 - "$1" <<'PY'
import json, os, sys
store = sys.argv[1]
used = set()
for t in os.listdir(os.path.join(store, "trees")):
    if t.endswith(".json"):
        for e in json.load(open(os.path.join(store, "trees", t)))["entries"]:
            if e.get("type") == "file":
                used.add(e["sha256"])
blobs = [b for d in os.listdir(os.path.join(store, "blobs"))
         for b in os.listdir(os.path.join(store, "blobs", d))]
tmp = os.listdir(os.path.join(store, "tmp"))
print(len(tmp), len([b for b in blobs if b not in used]))
PY
}
ms() { date +%s%N | cut -c1-13; }

# ---- killed takes leave temp files and blobs; gc removes them, and only them ----------------
id=$("$SBX" sandbox create --disk none) || { not_ok "create"; done_testing; exit; }
"$SBX" sandbox exec "$id" -- sh -c 'mkdir d; for i in 1 2 3 4 5 6 7 8; do head -c 6000000 /dev/urandom >d/big$i; done; echo small >s.txt'
keep=$("$SBX" sandbox snapshot "$id" | tail -n1)
"$SBX" sandbox exec "$id" -- sh -c 'for i in 1 2 3 4 5 6 7 8; do head -c 6000000 /dev/urandom >d/big$i; done'
t0=$(ms); "$SBX" sandbox snapshot "$id" >"$T/second"; t1=$(ms)
"$SBX" snapshot rm "$(tail -n1 "$T/second")" >/dev/null
for f in 0.2 0.4 0.6 0.8; do
    "$SBX" sandbox exec "$id" -- sh -c 'for i in 1 2 3 4 5 6 7 8; do head -c 6000000 /dev/urandom >d/big$i; done'
    timeout -s KILL "$(awk -v ms=$((t1 - t0)) -v f=$f 'BEGIN {printf "%.3f", ms * f / 1000}')" \
        "$SBX" sandbox snapshot "$id" >/dev/null 2>&1
done
read -r tmps blobs <<<"$(unused "$SBX_SNAPSHOTS")"
diag "after 4 killed takes: $tmps temp files, $blobs blobs no snapshot uses (a take takes $((t1 - t0)) ms)"
run "$SBX" snapshot gc --json
expect_rc 0 "snapshot gc"
got=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["temps"], d["blobs"])' <"$T/out")
expect_eq "$got" "$tmps $blobs" "gc removed exactly the temp files and the blobs no snapshot uses"
expect_eq "$(unused "$SBX_SNAPSHOTS")" "0 0" "nothing unused is left"
run "$SBX" snapshot ls --json
expect_in "$T/out" "\"content_digest\": \"$keep\"" "the snapshot taken before is still listed"
run "$SBX" sandbox create --snapshot "$keep" --disk none
expect_rc 0 "and it still restores"
"$SBX" sandbox rm "$(tail -n1 "$T/out")" >/dev/null 2>&1
run "$SBX" snapshot gc
expect_eq "$(cat "$T/out")" "removed 0 unused blobs (0 bytes) and 0 temp files (0 bytes)" "a second gc finds nothing"
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# ---- a take that fails removes what it wrote ---------------------------------------------------
if [ "$(id -u)" != 0 ]; then
    # An unreadable file stops the take (the owner, not root, cannot open a mode 000 file).
    id=$("$SBX" sandbox create --disk none)
    "$SBX" sandbox exec "$id" -- sh -c 'for i in 1 2 3; do head -c 3000000 /dev/urandom >f$i; done; echo x >z; chmod 000 z'
    run "$SBX" sandbox snapshot "$id"
    expect_rc 1 "a snapshot of a workspace with an unreadable file fails"
    expect_eq "$(unused "$SBX_SNAPSHOTS")" "0 0" "the failed take left no blob and no temp file"
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
    done_testing
    exit
fi
mkdir -p "$T/small"
if ! mount -t tmpfs -o size=10m tmpfs "$T/small"; then
    ok "no space in the store # SKIP cannot mount a tmpfs"
    done_testing
    exit
fi
mnt=$T/small
export SBX_SNAPSHOTS=$T/small/store
id=$("$SBX" sandbox create --disk none)
"$SBX" sandbox exec "$id" -- sh -c 'for i in 1 2 3; do head -c 4000000 /dev/urandom >f$i; done; echo small >s.txt'
run "$SBX" sandbox snapshot "$id"
expect_rc 1 "a snapshot that does not fit the store fails"
expect_in "$T/err" "no space left on device" "with ENOSPC"
expect_in "$T/err" "the workspace's files take 11." "saying how much the workspace needs"
expect_in "$T/err" " is free" "and how much is free"
expect_in "$T/err" "sbx snapshot rm REF" "and what can be freed"
used=$(du -sk "$SBX_SNAPSHOTS" | cut -f1)
if [ "$used" -lt 200 ]; then ok "the failed take removed its blobs (${used} KiB left)"; else
    not_ok "the failed take removed its blobs"; diag "$(du -ak "$SBX_SNAPSHOTS")"; fi
expect_eq "$(unused "$SBX_SNAPSHOTS")" "0 0" "no temp file or unused blob is left"
"$SBX" sandbox exec "$id" -- rm f2 f3
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "the next snapshot, which fits, works"
"$SBX" sandbox rm "$id" >/dev/null 2>&1
done_testing

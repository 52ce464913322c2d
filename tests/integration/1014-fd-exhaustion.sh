#!/usr/bin/env bash
# A caller out of file descriptors gets the real cause: every sbx sandbox command run under a
# small `ulimit -n` either works or fails naming "too many open files" and how to raise the
# limit — never "sandbox is gone", "no sandbox" or a count of descriptors, and a listing never
# quietly drops live sandboxes.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

run "$SBX" sandbox create
expect_rc 0 "create"
id=$(tail -n1 "$T/out")
echo data > "$T/f"

# Below 4 descriptors the dynamic loader itself fails, before sbx runs.
for n in 4 5 6 7 8 10 12; do
    for cmd in exec cp ps; do
        case $cmd in
        exec) args=(sandbox exec "$id" -- echo hi) ;;
        cp) args=(sandbox cp "$T/f" "$id:f") ;;
        ps) args=(sandbox ps) ;;
        esac
        bash -c 'ulimit -n "$1"; shift; exec "$@"' - "$n" "$SBX" "${args[@]}" >"$T/out" 2>"$T/err"
        rc=$?
        if [ "$rc" = 0 ]; then
            case $cmd in
            exec) expect_eq "$(cat "$T/out")" hi "ulimit -n $n: exec works" ;;
            ps) expect_in "$T/out" "$id" "ulimit -n $n: ps lists the live sandbox" ;;
            cp) ok "ulimit -n $n: cp works" ;;
            esac
            continue
        fi
        expect_in "$T/err" "too many open files" "ulimit -n $n: $cmd fails naming the cause"
        expect_in "$T/err" "ulimit -n" "ulimit -n $n: $cmd says how to raise the limit"
        for wrong in "is gone" "no sandbox" "descriptors, not"; do
            expect_not_in "$T/err" "$wrong" "ulimit -n $n: $cmd does not say '$wrong'"
        done
        [ "$cmd" != exec ] || expect_eq "$rc" 125 "ulimit -n $n: exec's own failure is status 125"
    done
done
# A create that runs out of descriptors leaves nothing behind, wherever it runs out (it used to
# leave its runtime directory and workspace at 4 to 6); checked before any other sbx command
# runs, since the next one that lists or creates would reclaim what a dead create left.
for n in 4 5 6 7 8 10 12 16 24; do
    before=$(ls "$RUNBASE" "$SBX_WORKSPACES" 2>/dev/null)
    bash -c 'ulimit -n "$1"; shift; exec "$@"' - "$n" "$SBX" sandbox create >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" = 0 ]; then
        ok "ulimit -n $n: create works"
        "$SBX" sandbox rm "$(tail -n1 "$T/out")" >/dev/null 2>&1
        continue
    fi
    expect_in "$T/err" "too many open files" "ulimit -n $n: create fails naming the cause"
    expect_in "$T/err" "ulimit -n" "ulimit -n $n: create says how to raise the limit"
    expect_eq "$(ls "$RUNBASE" "$SBX_WORKSPACES" 2>/dev/null)" "$before" "ulimit -n $n: the failed create left nothing"
done
run "$SBX" sandbox exec "$id" -- echo still
expect_eq "$(cat "$T/out")" still "the sandbox is fine afterwards"
done_testing

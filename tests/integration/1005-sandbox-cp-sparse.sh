#!/usr/bin/env bash
# sbx sandbox cp keeps holes both ways: a 1 GiB sparse file with a few KiB of data costs the
# destination only its data, and its content is exact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v jq >/dev/null || skip_all "jq is not installed (scripts/deps.txt)"

# Allocated 512-byte blocks of a file; "small" is well under 1 MiB.
blocks() { stat -c %b "$1"; }
SMALL=2048

# The file system under $T must keep holes itself, or there is nothing to check.
truncate -s 64M "$T/probe"
[ "$(blocks "$T/probe")" -lt 64 ] || skip_all "the file system of '$T' does not keep holes"
rm -f "$T/probe"

run "$SBX" sandbox create
expect_rc 0 "create"
id=$(cat "$T/out")
ws=$(jq -r .workspace "$RUNBASE/$id/state.json")

# Out: made inside, data at the start, in the middle and just before the end.
run "$SBX" sandbox exec "$id" -- sh -c '
    truncate -s 1G big &&
    printf head | dd of=big conv=notrunc status=none &&
    printf middle | dd of=big bs=1 seek=536870912 conv=notrunc status=none &&
    printf tail | dd of=big bs=1 seek=1073741000 conv=notrunc status=none &&
    stat -c %s big'
expect_rc 0 "a sparse 1 GiB file inside"
run "$SBX" sandbox cp "$id:big" "$T/out.bin"
expect_rc 0 "cp out"
expect_eq "$(stat -c %s "$T/out.bin")" 1073741824 "the copy has the whole length"
if cmp -s "$ws/big" "$T/out.bin"; then ok "the copy out has the same bytes"; else
    not_ok "the copy out has the same bytes"; fi
b=$(blocks "$T/out.bin")
if [ "$b" -lt "$SMALL" ]; then ok "the copy out stays sparse ($b blocks)"; else
    not_ok "the copy out stays sparse"; diag "$b blocks allocated"; fi

# A file that ends in data after a hole, and one that is all hole.
run "$SBX" sandbox exec "$id" -- sh -c 'truncate -s 100M empty'
run "$SBX" sandbox cp "$id:empty" "$T/empty.bin"
expect_rc 0 "cp out of a file that is all hole"
expect_eq "$(stat -c %s "$T/empty.bin")/$(blocks "$T/empty.bin")" "104857600/0" \
    "an all-hole file copies to an all-hole file"

# A copy to a pipe still has every byte.
run "$SBX" sandbox exec "$id" -- sh -c 'truncate -s 16M mid && printf x | dd of=mid bs=1 seek=8388608 conv=notrunc status=none'
run sh -c "\"$SBX\" sandbox cp \"$id:mid\" - | cmp - \"$ws/mid\""
expect_rc 0 "cp out to a pipe writes the holes as zeros"

# In: made on the host.
rm -f "$T/in.bin"
truncate -s 1G "$T/in.bin"
printf start | dd of="$T/in.bin" conv=notrunc status=none
printf quarter | dd of="$T/in.bin" bs=1 seek=268435456 conv=notrunc status=none
run "$SBX" sandbox cp "$T/in.bin" "$id:in.bin"
expect_rc 0 "cp in"
expect_eq "$(stat -c %s "$ws/in.bin")" 1073741824 "the copy in has the whole length"
if cmp -s "$T/in.bin" "$ws/in.bin"; then ok "the copy in has the same bytes"; else
    not_ok "the copy in has the same bytes"; fi
b=$(blocks "$ws/in.bin")
if [ "$b" -lt "$SMALL" ]; then ok "the copy in stays sparse ($b blocks)"; else
    not_ok "the copy in stays sparse"; diag "$b blocks allocated"; fi
run "$SBX" sandbox exec "$id" -- sh -c 'head -c 5 in.bin; dd if=in.bin bs=1 skip=268435456 count=7 status=none'
expect_eq "$(cat "$T/out")" "startquarter" "the sandbox reads the data where it was"

# The limit counts data, not holes: more data than the limit is still refused.
head -c 70M /dev/zero | tr '\0' x > "$T/dense.bin"
run "$SBX" sandbox cp "$T/dense.bin" "$id:dense.bin"
if [ "$rc" != 0 ] && grep -q "exceed" "$T/err"; then ok "more data than the per-file limit is refused"; else
    not_ok "more data than the per-file limit is refused"; diag "rc $rc: $(cat "$T/err")"; fi

run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
done_testing

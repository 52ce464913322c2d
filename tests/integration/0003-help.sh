#!/usr/bin/env bash
# One help table (src/cli/help-table.c) answers --help and -h of every command and subcommand,
# `sbx help TOPIC`, the man pages and the bash and zsh completions; its options are the ones the
# parsers accept.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
export SBX_CONVERSATIONS="$T/conversations.db" XDG_STATE_HOME="$T/state"
export OPENAI_API_KEY=sk-test-unused
unset OPENAI_BASE_URL

run "$SBX" __gen options
expect_rc 0 "the table lists its options"
cp "$T/out" "$T/options"
paths=$(cut -f1 "$T/options" | sort -u)
top=$(cut -f1 "$T/options" | grep -v ' ' | grep . | sort -u)
groups=$(cut -f1 "$T/options" | grep ' ' | cut -d' ' -f1 | sort -u)

# --help, -h and `sbx help PATH`: status 0, the synopsis on stdout, nothing on stderr, one text.
bad=
while IFS= read -r p; do
    # shellcheck disable=SC2086 # a path's words are separate arguments
    for h in --help -h; do
        "$SBX" $p $h >"$T/h$h" 2>"$T/e"
        r=$?
        [ "$r" = 0 ] && [ ! -s "$T/e" ] && grep -qF "usage: sbx ${p:-<command>}" "$T/h$h" ||
            bad="$bad '$p $h'(rc $r: $(head -c 200 "$T/e"))"
    done
    "$SBX" help $p >"$T/hh" 2>"$T/e" || bad="$bad 'help $p'(rc $?)"
    cmp -s "$T/hh" "$T/h--help" && cmp -s "$T/h-h" "$T/h--help" || bad="$bad '$p'(texts differ)"
done <<<"$paths"
expect_eq "$bad" "" "every command and subcommand answers --help, -h and sbx help with its synopsis"
for g in sandbox snapshot conversation state memory manifest; do
    echo "$groups" | grep -qx "$g" && ok "'$g' has subcommands in the table" || not_ok "'$g' has subcommands in the table"
done

run "$SBX" sandbox create --help
expect_rc 0 "sbx sandbox create --help (the issue's example)"
expect_not_in "$T/err" "unexpected argument" "is no longer an unexpected argument"
expect_in "$T/out" "--pass-secret NAME" "and lists the options"
run "$SBX" sandbox create --json --memory 1G -h
expect_rc 0 "-h after other options is help too"
run "$SBX" run -m replay:x --timeout 1s --help
expect_rc 0 "sbx run: --help after options with values"
expect_in "$T/out" "usage: sbx run" "shows the run help"
run "$SBX" sandbox ls --help
expect_in "$T/out" "usage: sbx sandbox ps" "an alias shows its command's help"
run "$SBX" sandbox help exec
expect_rc 0 "sbx sandbox help exec"
expect_in "$T/out" "usage: sbx sandbox exec" "is the exec help"
run "$SBX" sandbox exec no-such -- ls --help
expect_not_in "$T/out" "usage:" "--help after the command of exec belongs to the command"
expect_rc 125 "and exec fails for the missing sandbox"
run "$SBX" run -m -h --no-such-option
expect_not_in "$T/out" "usage:" "-h as the value of an option is not help"
expect_rc 2 "the line is parsed as usual"
run "$SBX" snapshot nope --help
expect_rc 0 "help asked of an unknown subcommand shows the command's help"
expect_in "$T/out" "usage: sbx snapshot <command>" "the snapshot help"
expect_eq "$(grep -c "sbx snapshot ls \[" "$T/out")" 1 "which shows each usage once"

run "$SBX" sandbox create --bogus
expect_rc 2 "a subcommand's usage error"
expect_in "$T/err" "Try 'sbx sandbox create --help'." "points to the subcommand's help"

run "$SBX" help nope
expect_rc 2 "an unknown help topic is a usage error"
expect_in "$T/err" "unknown help topic 'nope'" "naming it"
expect_in "$T/err" "'sandbox'" "and the known topics"
expect_in "$T/err" "'run'" "all of them"
run "$SBX" help sandbox nope
expect_rc 2 "an unknown subcommand topic is a usage error"
expect_in "$T/err" "'sandbox create'" "naming the command's subcommands"
run "$SBX" help
expect_rc 0 "sbx help"
for c in $top; do grep -q "^  $c " "$T/out" || not_ok "sbx help lists '$c'"; done
ok "sbx help lists every command"

# A line of `sbx __gen options` into p (the path, "" for sbx itself), o (the option), a (its
# value's name or -).
split() {
    p=${1%%$'\t'*}
    a=${1##*$'\t'}
    o=${1#*$'\t'}
    o=${o%$'\t'*}
}

# Each option of the table is accepted by its command's parser: given with a plausible value and
# followed by an unknown option, the complaint is never about the option itself. The usage
# error's hint ("Try 'sbx ... --help'") then works. The loop runs sbx 685 times: it forks
# nothing else per option (shell builtins), and each distinct hint is run once.
value() { # into v: a value for an option whose value is named $1
    case ${1%%|*} in
    N) v=1 ;; SIZE) v=1G ;; DURATION) v=1s ;; SECONDS) v=1 ;; BYTES) v=100 ;;
    PATH*) v=/tmp ;; NAME) v=OPENAI_API_KEY ;; KEY=VALUE) v=A=B ;; ADDR) v=127.0.0.1 ;;
    *[a-z]*) v=${1%%|*} ;; *) v=x ;;
    esac
}
declare -A is_group=() hint_seen=()
for g in $groups; do is_group[$g]=1; done
hint_re="^Try '(sbx .* --help)'\.\$"
bad=
hints=
n=0
while IFS= read -r line; do
    split "$line"
    case $o in --help | -h) continue ;; esac
    [ -n "$p" ] && [ -n "${is_group[$p]:-}" ] && continue
    args=()
    [ "$a" = - ] || { value "$a"; args=("$v"); }
    # shellcheck disable=SC2086
    timeout 20 "$SBX" $p "$o" "${args[@]}" --zz-sentinel </dev/null >/dev/null 2>"$T/e"
    n=$((n + 1))
    e=
    IFS= read -r -d '' e <"$T/e"
    re="(unknown option|unexpected argument|invalid option|unrecognized option) '$o'"
    [[ $e =~ $re ]] && bad="$bad '$p $o': ${e:0:200};"
    hint=
    while IFS= read -r l; do
        [[ $l =~ $hint_re ]] && hint=${BASH_REMATCH[1]}
    done <"$T/e"
    if [ -n "$hint" ] && [ -z "${hint_seen[$hint]:-}" ]; then
        hint_seen[$hint]=1
        # shellcheck disable=SC2086
        ${hint/#sbx/$SBX} >/dev/null 2>&1 || hints="$hints '$hint'"
    fi
done <"$T/options"
expect_eq "$bad" "" "every option of the table ($n) is accepted by its command's parser"
expect_eq "$hints" "" "every usage error's 'Try sbx ... --help' works"
# And the other way: every long option the parsers spell is in the table.
src="$SBX_SRCDIR/src/cli"
for f in run memory; do
    for o in $(grep -oE '\{"[a-z-]+", (no|required)_argument' "$src/cmd-$f.c" | cut -d'"' -f2); do
        grep -qP "^$f( [a-z]+)?\t--$o\t" "$T/options" || bad="$bad $f:--$o"
    done
done
for o in $(grep -oE '\{"[a-z-]+", (no|required)_argument' "$src/cmd-sandbox-create.c" | cut -d'"' -f2); do
    grep -qP "^sandbox (create|resume)\t--$o\t" "$T/options" || bad="$bad sandbox-create:--$o"
done
for f in sandbox snapshot manifest conversation state; do
    for o in $(cat "$src/cmd-$f"*.c | grep -oE '"--[a-z-]+"' | tr -d '"' | sort -u); do
        grep -qP "^$f( [a-z]+)?\t$o\t" "$T/options" || bad="$bad $f:$o"
    done
done
expect_eq "$bad" "" "every long option the parsers know is in the table"
# The options of a new sandbox come from the providers' table: every provider flag is in the
# help of run, sandbox create and sandbox resume, every locator flag in that of exec.
flags=$("$SBX" sandbox providers --json | python3 -c 'import json,sys
for p in json.load(sys.stdin):
    for o in p["options"]:
        if o["flag"]: print(o["flag"], int(o["locator"]))' | sort -u)
bad=
while read -r flag locator; do
    for p in run "sandbox create" "sandbox resume"; do
        grep -qP "^$p\t--$flag\t" "$T/options" || bad="$bad '$p --$flag'"
    done
    [ "$locator" = 0 ] || grep -qP "^sandbox exec\t--$flag\t" "$T/options" || bad="$bad 'sandbox exec --$flag'"
done <<<"$flags"
expect_eq "$bad" "" "every provider flag of the registry is in the help ($(echo "$flags" | wc -l) flags)"
for p in run "sandbox create"; do
    grep -qP "^$p\t--provider-option\tKEY=VALUE" "$T/options" && grep -qP "^$p\t-o\tKEY=VALUE" "$T/options" &&
        ok "'$p' has -o/--provider-option KEY=VALUE" || not_ok "'$p' has -o/--provider-option KEY=VALUE"
done
run "$SBX" sandbox create --help
# (the providers after docker, if any, are named too)
grep -qE "^ +--memory SIZE +local, docker(, [a-z0-9_-]+)*: memory limit" "$T/out" &&
    ok "a flag two providers declare alike is told once, with both names" ||
    not_ok "a flag two providers declare alike is told once, with both names"

# Man pages: one per command, valid roff, every option of the table on its command's page.
mkdir "$T/man"
run "$SBX" __gen man "$T/man"
expect_rc 0 "sbx __gen man DIR"
want=$( (echo sbx.1; for c in $top; do echo "sbx-$c.1"; done) | sort)
expect_eq "$(ls "$T/man" | sort)" "$want" "sbx.1 and a page per command"
expect_eq "$(ls "$SBX_BUILDDIR/docs" | grep '\.1$' | sort)" "$want" "the build made the same pages (docs/meson.build)"
for f in "$T/man"/*.1; do cmp -s "$f" "$SBX_BUILDDIR/docs/${f##*/}" || not_ok "built ${f##*/} is current"; done
if command -v groff >/dev/null; then
    bad=
    for f in "$T/man"/*.1; do
        out=$(groff -man -Tutf8 -ww -z "$f" 2>&1) && [ -z "$out" ] || bad="$bad ${f##*/}: $out"
    done
    expect_eq "$bad" "" "groff -man -ww finds nothing to warn about"
else
    diag "groff is not installed: the pages' structure is checked with grep only"
fi
bad=
for f in "$T/man"/*.1; do
    for s in '^\.TH SBX' '^\.SH NAME' '^\.SH SYNOPSIS' '^\.SH DESCRIPTION' '^\.SH EXIT STATUS' '^\.SH SEE ALSO'; do
        grep -q "$s" "$f" || bad="$bad ${f##*/}:$s"
    done
done
expect_eq "$bad" "" "every page has NAME, SYNOPSIS, DESCRIPTION, EXIT STATUS and SEE ALSO"
bad=
while IFS= read -r line; do
    split "$line"
    page="$T/man/sbx${p:+-${p%% *}}.1"
    grep -qF -- "${o//-/\\-}" "$page" || bad="$bad '$p $o'"
    case $p in *" "*) grep -qF ".SS \"sbx $p\"" "$page" || bad="$bad '$p'(no section)" ;; esac
done <"$T/options"
expect_eq "$bad" "" "every option and subcommand of the table is on its page"
if command -v man >/dev/null; then
    MANWIDTH=80 man -l "$T/man/sbx-sandbox.1" >"$T/out" 2>"$T/err"
    expect_in "$T/out" "sbx sandbox create" "man -l renders the sandbox page"
fi

# bash completion.
"$SBX" __gen bash >"$T/sbx.bash"
cmp -s "$T/sbx.bash" "$SBX_BUILDDIR/docs/sbx" && ok "the built bash completion is current" ||
    not_ok "the built bash completion is current"
complete_words() { # WORD... : what bash completes for the last word
    bash --norc --noprofile -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sbx; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$T/sbx.bash" "$@"
}
expect_eq "$(bash --norc --noprofile -c '. "$1"; complete -p sbx' _ "$T/sbx.bash")" \
    "complete -o bashdefault -o default -F _sbx sbx" "the script registers _sbx for sbx"
expect_eq "$(complete_words sbx sa)" sandbox "sbx sa<TAB> completes to sandbox"
expect_eq "$(complete_words sbx sandbox cr)" create "sbx sandbox cr<TAB> completes to create"
expect_eq "$(complete_words sbx run --no-s)" --no-stream "options of a command complete"
expect_eq "$(complete_words sbx sandbox ls --a)" "--all" "options of an alias complete"
expect_eq "$(complete_words sbx help sandbox ex)" exec "help topics complete"
# Operands that name a sandbox or a snapshot complete from sbx itself: ids and names.
cid=$("$SBX" sandbox create --isolation none --name comp-$$ 2>/dev/null)
expect_eq "$(complete_words "$SBX" sandbox exec comp-)" "comp-$$" "a sandbox name completes"
expect_eq "$(complete_words "$SBX" sandbox logs "${cid:0:6}")" "$cid" "and an id"
expect_eq "$(complete_words "$SBX" run "${cid:0:6}")" "" "a prompt is not completed with ids"
ref=$("$SBX" sandbox snapshot "$cid" 2>/dev/null)
expect_eq "$(complete_words "$SBX" snapshot cat sha256:)" "${ref:0:19}" "a snapshot reference completes"
"$SBX" sandbox rm "$cid" >/dev/null 2>&1

# zsh completion.
"$SBX" __gen zsh >"$T/_sbx"
cmp -s "$T/_sbx" "$SBX_BUILDDIR/docs/_sbx" && ok "the built zsh completion is current" ||
    not_ok "the built zsh completion is current"
expect_eq "$(head -n1 "$T/_sbx")" "#compdef sbx" "the zsh script starts with #compdef sbx"
if command -v zsh >/dev/null; then
    run zsh -n "$T/_sbx"
    expect_rc 0 "zsh -n accepts the zsh completion"
else
    diag "zsh is not installed: the zsh completion's syntax is NOT checked, only its content"
    bad=
    for c in $top; do grep -qF "'$c:" "$T/_sbx" || bad="$bad $c"; done
    expect_eq "$bad" "" "zsh absent: the generated zsh completion names every command"
fi

# meson install puts the pages and completions where man, bash-completion and zsh look.
if command -v meson >/dev/null; then
    DEST="$T/dest"
    run meson install -C "$SBX_BUILDDIR" --no-rebuild --quiet --destdir "$DEST"
    expect_rc 0 "meson install into a DESTDIR"
    read -r PREFIX MANDIR DATADIR <<<"$(meson introspect "$SBX_BUILDDIR" --buildoptions | python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o["prefix"], o["mandir"], o["datadir"])')"
    for f in "$MANDIR/man1/sbx.1" "$MANDIR/man1/sbx-sandbox.1" "$DATADIR/bash-completion/completions/sbx" \
        "$DATADIR/zsh/site-functions/_sbx"; do
        case $f in /*) ff="$DEST$f" ;; *) ff="$DEST$PREFIX/$f" ;; esac
        [ -s "$ff" ] && ok "installed: $f" || not_ok "installed: $f"
    done
fi
done_testing

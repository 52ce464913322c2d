#!/usr/bin/env bash
# Every repository path a document names exists: README.md, tests/README.md, bench/README.md,
# docs/**/*.md and examples/**/README.md. What counts as a path:
#   - a word starting with src/, tests/, include/, docs/, scripts/, bench/, examples/ or .ci/
#     (a ":LINE" after it is dropped);
#   - a C file or header named with its folder, e.g. `session/registry.c` or `sbx/session.h`: it
#     must be the end of a file's path under src/ or include/;
#   - the target of a Markdown link, relative to the document's folder (not URLs or anchors).
# A program is named like its source: bench/bench-exec is there when bench/bench-exec.c is. An
# example's README may name a file inside the example by its path there (the end of a path
# under the README's folder). Placeholders are not paths: a word with <...>, *, {...}, "...", or
# a capitals-only part no file name in the tree uses (src/providers/NAME/, fuzz-NAME.c; README
# is a real name). One result per document; a failure lists each missing path with its line.
. "$(dirname "$0")/lib.sh"
cd "$SBX_SRCDIR" || exit 1

python3 - <<'PY' >"$T/results"
import glob, os, re

docs = ["README.md", "tests/README.md", "bench/README.md"]
docs += sorted(glob.glob("docs/**/*.md", recursive=True))
docs += sorted(glob.glob("examples/**/README.md", recursive=True))
docs = [d for d in docs if os.path.isfile(d)]

top = r"(?:src|tests|include|docs|scripts|bench|examples|\.ci)/"
path_re = re.compile(r"(?<![\w./~$@-])(" + top + r"[\w./<>*{}+,-]*)")
cfile_re = re.compile(r"(?<![\w./~$@<>-])((?:[\w+-]+/)+[\w+-]+\.[ch])(?![\w/])")
link_re = re.compile(r"\]\(([^)\s]+)\)")

all_files = []
for d, subdirs, names in os.walk("."):
    subdirs[:] = [s for s in subdirs if not s.startswith(".") and not s.startswith("build")]
    all_files += [os.path.join(d, n)[2:] for n in names]
code_files = [f for f in all_files if f.startswith(("src/", "include/"))]
# Capitals-only words of real file names (README, SKILL, MEMORY): not placeholders.
caps_in_tree = {w for f in all_files for w in re.split(r"[/._-]", f) if re.fullmatch(r"[A-Z][A-Z0-9]*", w)}

def placeholder(p):
    if re.search(r"[<>*{}]|\.\.\.|…", p):
        return True
    words = re.split(r"[/._-]", p)
    return any(re.fullmatch(r"[A-Z][A-Z0-9]*", w) and w not in caps_in_tree for w in words)

def exists(p, doc):
    q = p.rstrip("/") or "."
    if os.path.exists(q) or os.path.exists(q + ".c"):
        return True
    base = os.path.dirname(doc)
    return doc.startswith("examples/") and any(
        f.startswith(base + "/") and f.endswith("/" + q) for f in all_files)

for doc in docs:
    missing = []
    with open(doc, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            for m in path_re.finditer(line):
                p = m.group(1).rstrip(".,;")
                # "src/core/fs.c," or "(src/x.c)": punctuation after a path is not part of it
                p = re.sub(r"[,)]+$", "", p)
                if not placeholder(p) and not exists(p, doc):
                    missing.append(f"{ln}: {p}")
            for m in cfile_re.finditer(line):
                p = m.group(1)
                if re.match(top, p) or placeholder(p):
                    continue
                if not any(c == p or c.endswith("/" + p) for c in code_files):
                    missing.append(f"{ln}: {p} (no such file under src/ or include/)")
            for m in link_re.finditer(line):
                target = m.group(1).split("#")[0]
                if not target or re.match(r"[a-z]+:", target) or placeholder(target):
                    continue
                p = os.path.normpath(os.path.join(os.path.dirname(doc), target))
                if not os.path.exists(p):
                    missing.append(f"{ln}: {target} (link)")
    print(doc + "\t" + "\t".join(missing))
PY
[ -s "$T/results" ] || { not_ok "the documents could be read"; done_testing; exit; }
while IFS=$'\t' read -r doc rest; do
    if [ -z "$rest" ]; then
        ok "$doc names no missing path"
    else
        not_ok "$doc names no missing path"
        diag "$(tr '\t' '\n' <<<"$rest")"
    fi
done <"$T/results"
done_testing

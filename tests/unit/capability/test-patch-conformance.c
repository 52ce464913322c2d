/* Where sbx's patch engine agrees with the reference implementations (the agents SDKs' differ for
 * diffs and create_file operations, Codex for "*** Begin Patch" text) and where it deliberately
 * differs; docs/internals/patch.md has the table. The data is our own. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/patch.h"
#include "memfs.h"
#include "tap.h"

/* ---- patch text against a tree ----------------------------------------------------------- */

#define DIRECTORY ((const char *)1)

/* before/after: {path, content} pairs ending with {NULL}; content DIRECTORY for a directory.
 * after is the whole tree once applied; err, when set, is a part of the expected error. */
struct text_case {
    const char *what;
    const char *before[6][2];
    const char *patch;
    const char *after[6][2];
    const char *err;
};

static void run_text_case(const struct text_case *c)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    size_t want = 0;

    printf("# %s\n", c->what);
    mem_init(&m);
    for (size_t i = 0; c->before[i][0]; i++) {
        const char *d = c->before[i][1] == DIRECTORY ? NULL : c->before[i][1];
        mputn(&m, c->before[i][0], d, d ? strlen(d) : 0);
    }
    memset(&res, 0, sizeof(res));
    int rc = sbx_patch_apply_text(c->patch, strlen(c->patch), &m.fs, NULL, &res, &err);
    if (c->err) {
        CHECK(rc < 0);
        CHECK_CONTAINS(err.msg, c->err);
    } else {
        CHECK_OK(rc, &err);
        sbx_patch_result_release(&res);
    }
    for (; c->after[want][0]; want++) {
        struct mfile *f = mfind(&m, c->after[want][0]);
        CHECK(f != NULL);
        if (!f)
            continue;
        if (c->after[want][1] == DIRECTORY)
            CHECK(f->data == NULL);
        else
            CHECK_EQ_STR(f->data, c->after[want][1]);
    }
    CHECK_EQ_INT(m.n, want);
    mem_release(&m);
}

#define BEGIN "*** Begin Patch\n"
#define END   "*** End Patch\n"

static const struct text_case text_cases[] = {
        /* Matched: Codex's patch text. */
        {"add file: every + line ends with a newline",
         {{NULL}},
         BEGIN "*** Add File: notes/todo.md\n+- buy paint\n" END,
         {{"notes/todo.md", "- buy paint\n"}, {NULL}},
         NULL},
        {"add, delete and update in one patch",
         {{"old.cfg", "x=1\n"}, {"main.c", "int a;\nint b;\n"}, {NULL}},
         BEGIN "*** Add File: inc/new.h\n+#pragma once\n*** Delete File: old.cfg\n"
               "*** Update File: main.c\n@@\n-int b;\n+long b;\n" END,
         {{"inc/new.h", "#pragma once\n"}, {"main.c", "int a;\nlong b;\n"}, {NULL}},
         NULL},
        {"two bare @@ hunks apply in order",
         {{"n.txt", "one\ntwo\nthree\nfour\n"}, {NULL}},
         BEGIN "*** Update File: n.txt\n@@\n-two\n+2\n@@\n-four\n+4\n" END,
         {{"n.txt", "one\n2\nthree\n4\n"}, {NULL}},
         NULL},
        {"a move into a directory that does not exist yet",
         {{"src/a.py", "print(1)\n"}, {"src/b.py", "b\n"}, {NULL}},
         BEGIN
         "*** Update File: src/a.py\n*** Move to: lib/pkg/a.py\n@@\n-print(1)\n+print(2)\n" END,
         {{"src/b.py", "b\n"}, {"lib/pkg/a.py", "print(2)\n"}, {NULL}},
         NULL},
        {"a move replaces an existing destination",
         {{"a.txt", "mine\n"}, {"b.txt", "theirs\n"}, {NULL}},
         BEGIN "*** Update File: a.txt\n*** Move to: b.txt\n@@\n-mine\n+ours\n" END,
         {{"b.txt", "ours\n"}, {NULL}},
         NULL},
        {"add file replaces an existing file",
         {{"r.txt", "stale\n"}, {NULL}},
         BEGIN "*** Add File: r.txt\n+fresh\n" END,
         {{"r.txt", "fresh\n"}, {NULL}},
         NULL},
        {"a patch with no operation is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN END,
         {{"k.txt", "k\n"}, {NULL}},
         "no file operations"},
        {"context that is nowhere is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Update File: k.txt\n@@\n-absent\n+present\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "does not match"},
        {"deleting a missing file is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Delete File: ghost.txt\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "no such file"},
        {"an update without hunks is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Update File: k.txt\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "has no hunks"},
        {"updating a missing file is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Update File: ghost.txt\n@@\n-a\n+b\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "no such file"},
        {"deleting a directory is refused",
         {{"d", DIRECTORY}, {"d/f", "f\n"}, {NULL}},
         BEGIN "*** Delete File: d\n" END,
         {{"d", DIRECTORY}, {"d/f", "f\n"}, {NULL}},
         "is a directory"},
        {"an unknown file header is refused",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Rename File: k.txt\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "not '*** Rename File: k.txt'"},
        {"whitespace around the markers is ignored",
         {{"w.txt", "left\n"}, {NULL}},
         "  *** Begin Patch \n\t*** Update File: w.txt\n@@\n-left\n+right\n *** End Patch\t\n",
         {{"w.txt", "right\n"}, {NULL}},
         NULL},
        {"non-ASCII context and replacement",
         {{"u.txt", "Grüße\nÅngström — 1 Å\nend\n"}, {NULL}},
         BEGIN "*** Update File: u.txt\n@@\n Grüße\n-Ångström — 1 Å\n+Ångström — 0.1 nm ✓\n" END,
         {{"u.txt", "Grüße\nÅngström — 0.1 nm ✓\nend\n"}, {NULL}},
         NULL},
        {"a deletion between context lines",
         {{"l.txt", "keep1\ndrop\nkeep2\n"}, {NULL}},
         BEGIN "*** Update File: l.txt\n@@\n keep1\n-drop\n keep2\n" END,
         {{"l.txt", "keep1\nkeep2\n"}, {NULL}},
         NULL},
        {"End of File ties the hunk to the last lines",
         {{"t.txt", "x\ny\nx\ny\n"}, {NULL}},
         BEGIN "*** Update File: t.txt\n@@\n x\n-y\n+z\n*** End of File\n" END,
         {{"t.txt", "x\ny\nx\nz\n"}, {NULL}},
         NULL},
        {"CRLF file, two hunks, an inserted empty line",
         {{"w.txt", "ab\r\ncd\r\nef\r\n"}, {NULL}},
         BEGIN "*** Update File: w.txt\n@@\n-ab\n+AB\n@@\n cd\n+\n+gh\n ef\n" END,
         {{"w.txt", "AB\r\ncd\r\n\r\ngh\r\nef\r\n"}, {NULL}},
         NULL},
        {"new lines come out in the order written, even when they repeat",
         {{"o.txt", "x\ny\n"}, {NULL}},
         BEGIN "*** Update File: o.txt\n@@\n-x\n-y\n+y\n+y\n+x\n" END,
         {{"o.txt", "y\ny\nx\n"}, {NULL}},
         NULL},
        {"a context line keeps its own ending",
         {{"e.txt", "dup\r\ndup\n"}, {NULL}},
         BEGIN "*** Update File: e.txt\n@@\n-dup\n dup\n" END,
         {{"e.txt", "dup\n"}, {NULL}},
         NULL},
        /* Matched after this comparison: a replacing line takes the replaced line's ending. */
        {"a line replacing a CRLF line in a mixed file stays CRLF",
         {{"m.txt", "p\r\nq\nr\r\ns\n"}, {NULL}},
         BEGIN "*** Update File: m.txt\n@@\n p\n q\n-r\n+R\n+R2\n s\n" END,
         {{"m.txt", "p\r\nq\nR\r\nR2\r\ns\n"}, {NULL}},
         NULL},
        {"... and one replacing an LF line in a CRLF file stays LF",
         {{"m.txt", "p\r\nq\nr\r\n"}, {NULL}},
         BEGIN "*** Update File: m.txt\n@@\n-q\n+Q\n r\n+t\n" END,
         {{"m.txt", "p\r\nQ\nr\r\nt\r\n"}, {NULL}},
         NULL},
        /* Matched after this comparison: Codex appends an unanchored first insertion. */
        {"an unanchored first insertion in patch text goes to the end",
         {{"log.txt", "first\nsecond\n"}, {NULL}},
         BEGIN "*** Update File: log.txt\n@@\n+third\n+fourth\n" END,
         {{"log.txt", "first\nsecond\nthird\nfourth\n"}, {NULL}},
         NULL},
        {"... also without a @@ line",
         {{"log.txt", "first\n"}, {NULL}},
         BEGIN "*** Update File: log.txt\n+second\n" END,
         {{"log.txt", "first\nsecond\n"}, {NULL}},
         NULL},
        {"... while an anchored insertion goes after its anchor",
         {{"s.py", "import os\n\ndef f():\n    pass\n"}, {NULL}},
         BEGIN "*** Update File: s.py\n@@ import os\n+import re\n" END,
         {{"s.py", "import os\nimport re\n\ndef f():\n    pass\n"}, {NULL}},
         NULL},
        /* Deliberate differences from Codex. */
        {"a failing later operation leaves the earlier ones undone",
         {{"k.txt", "k\n"}, {NULL}},
         BEGIN "*** Add File: made.txt\n+made\n*** Update File: ghost.txt\n@@\n-a\n+b\n" END,
         {{"k.txt", "k\n"}, {NULL}},
         "(no file was changed)"},
        {"a file without a final newline keeps lacking one",
         {{"raw.txt", "alpha\nbeta"}, {NULL}},
         BEGIN "*** Update File: raw.txt\n@@\n-beta\n+gamma\n+delta\n" END,
         {{"raw.txt", "alpha\ngamma\ndelta"}, {NULL}},
         NULL},
};

static void test_patch_text(void)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(text_cases); i++)
        run_text_case(&text_cases[i]);
}

/* ---- one file's update body (the SDKs' differ, update_file operations) -------------------- */

struct diff_case {
    const char *what, *in, *diff, *out, *err;
};

static const struct diff_case diff_cases[] = {
        {"a floating hunk fills an empty file", "", "@@\n+x\n+y", "x\ny\n", NULL},
        {"... with the CRLF of a CRLF diff", "", "@@\r\n+x\r\n+y", "x\r\ny\r\n", NULL},
        {"a replacement under an anchor", "p\nq\nr\n", "@@ p\n-q\n+Q\n r", "p\nQ\nr\n", NULL},
        {"a deletion under an anchor", "p\nq\nr\n", "@@ p\n-q\n r", "p\nr\n", NULL},
        {"a CRLF file stays CRLF under an LF diff", "p\r\nq\r\n", "@@ p\n-q\n+Q", "p\r\nQ\r\n",
         NULL},
        {"an LF file stays LF under a CRLF diff", "p\nq\n", "@@ p\r\n-q\r\n+Q", "p\nQ\n", NULL},
        {"stacked anchors pick the method of the named class",
         "struct A\n  fn go\n    old\nstruct B\n  fn go\n    old\n",
         "@@ struct B\n@@   fn go\n-    old\n+    new",
         "struct A\n  fn go\n    old\nstruct B\n  fn "
         "go\n    new\n",
         NULL},
        {"a stack may repeat its parent for the next hunk", "mod m\n  a()\n    0\n  b()\n    0\n",
         "@@ mod m\n@@   a()\n-    0\n+    1\n@@ mod m\n@@   b()\n-    0\n+    2",
         "mod m\n  a()\n    1\n  b()\n    2\n", NULL},
        {"a stack ending in a bare @@", "mod m\n  a()\n    0\n", "@@ mod m\n@@\n-    0\n+    9",
         "mod m\n  a()\n    9\n", NULL},
        {"an unknown single anchor is advisory", "u\nv\n", "@@ not here\n-v\n+V", "u\nV\n", NULL},
        {"an unified-diff line-number header is only anchor text", "u\nv\n",
         "@@ -1,2 +1,2 @@\n u\n-v\n+V", "u\nV\n", NULL},
        {"a stack with an unknown inner anchor is refused", "mod m\n  a()\n    0\n",
         "@@ mod m\n@@   z()\n-    0\n+    1", NULL,
         "does not match (Invalid Anchor): the line 'z()' of its '@@' header was not found"},
        {"a stack with an unknown outer anchor is refused", "mod m\n  a()\n    0\n",
         "@@ mod q\n@@   a()\n-    0\n+    1", NULL,
         "does not match (Invalid Anchor): the line 'mod q' of its '@@' header was not found"},
        {"an unknown anchor then a bare @@ is refused", "u\nv\n", "@@ gone\n@@\n-v\n+V", NULL,
         "does not match (Invalid Anchor): the line 'gone' of its '@@' header"},
        {"wrong context is refused", "u\nv\n", "@@\n w\n-v\n+V", NULL,
         "hunk 1 does not match (Invalid Context): "},
        {"a file's missing final newline is kept", "k=1\nk=2", "-k=2\n+k=3", "k=1\nk=3", NULL},
        {"... also in a CRLF file", "k=1\r\nk=2", "-k=1\n+k=0", "k=0\r\nk=2", NULL},
        {"a replacing line takes the replaced line's ending", "a\r\nb\nc\r\nd\n", "@@\n b\n-c\n+C",
         "a\r\nb\nC\r\nd\n", NULL},
        {"a hunk without @@ starts at the top", "a\nb\na\n", "-a\n+A", "A\nb\na\n", NULL},
        {"an empty context line matches an empty line", "f()\n\ng()\n", " f()\n+h()\n\n g()",
         "f()\nh()\n\ng()\n", NULL},
        {"context only leaves the file as it is", "same", " same", "same", NULL},
        /* In the operations form an unanchored insertion stays at the cursor (the SDK's rule). */
        {"an unanchored insertion goes at the top", "b\n", "@@\n+a", "a\nb\n", NULL},
        /* Deliberately refused: the reference returns the text unchanged. */
        {"an empty update body", "text\n", "", NULL, "has no hunks"},
};

static void test_update_body(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (size_t i = 0; i < SBX_ARRAY_LEN(diff_cases); i++) {
        const struct diff_case *c = &diff_cases[i];
        char *out = NULL;
        size_t len = 0;
        printf("# %s\n", c->what);
        int rc = sbx_patch_apply_diff(c->in, strlen(c->in), c->diff, strlen(c->diff), "f", NULL,
                                      &out, &len, NULL, &err);
        if (c->out) {
            CHECK_OK(rc, &err);
            CHECK_EQ_STR(out, c->out);
        } else {
            CHECK(rc < 0);
            CHECK_CONTAINS(err.msg, c->err);
        }
        free(out);
    }
}

/* ---- create_file operations --------------------------------------------------------------- */

static void test_create_file(void)
{
    static const struct {
        const char *diff, *out, *err;
    } cases[] = {
            {"+x = 1\n+\n+y = 2", "x = 1\n\ny = 2", NULL}, /* an empty line inside */
            {"+x = 1\n+y = 2\n+", "x = 1\ny = 2\n", NULL}, /* a bare + last: the final newline */
            {"+one line", "one line", NULL},
            {"+a\r\n+b\r\n+", "a\r\nb\r\n", NULL},
            {"x = 1", NULL, "does not start with '+'"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        struct memfs m;
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_patch_result res;
        struct sbx_patch *p = NULL;
        struct sbx_patch_op_spec op = {SBX_PATCH_ADD, "c.txt", NULL, cases[i].diff,
                                       strlen(cases[i].diff)};
        mem_init(&m);
        memset(&res, 0, sizeof(res));
        int rc = sbx_patch_from_ops(&op, 1, NULL, &p, &err);
        if (!rc)
            rc = sbx_patch_apply(p, &m.fs, NULL, &res, &err);
        if (cases[i].out) {
            CHECK_OK(rc, &err);
            CHECK(m.n == 1 && m.files[0].data);
            if (m.n == 1)
                CHECK_EQ_STR(m.files[0].data, cases[i].out);
            sbx_patch_result_release(&res);
        } else {
            CHECK(rc < 0);
            CHECK_CONTAINS(err.msg, cases[i].err);
        }
        sbx_patch_free(p);
        mem_release(&m);
    }
}

/* An update_file operation with a bare "@@" insertion follows the SDK (cursor), unlike patch
 * text (Codex: the end). */
static void test_update_file_insertion(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    struct sbx_patch *p = NULL;
    const char *diff = "@@\n+top\n";
    struct sbx_patch_op_spec op = {SBX_PATCH_UPDATE, "o.txt", NULL, diff, strlen(diff)};
    mem_init(&m);
    mputn(&m, "o.txt", "body\n", 5);
    memset(&res, 0, sizeof(res));
    CHECK_OK(sbx_patch_from_ops(&op, 1, NULL, &p, &err), &err);
    CHECK_OK(sbx_patch_apply(p, &m.fs, NULL, &res, &err), &err);
    CHECK_EQ_STR(mfind(&m, "o.txt")->data, "top\nbody\n");
    sbx_patch_result_release(&res);
    sbx_patch_free(p);
    mem_release(&m);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_patch_text);
    TAP_RUN(test_update_body);
    TAP_RUN(test_create_file);
    TAP_RUN(test_update_file_insertion);
    return TAP_DONE();
}

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/patch.h"
#include "sbx/strv.h"
#include "memfs.h"
#include "tap.h"

/* Apply text to m; return rc, the summary in *summary (caller frees) on success. */
static int apply(struct memfs *m, const char *text, const struct sbx_patch_options *opts,
                 struct sbx_patch_result *res, struct sbx_error *err)
{
    memset(res, 0, sizeof(*res));
    return sbx_patch_apply_text(text, strlen(text), &m->fs, opts, res, err);
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_add_update_delete_move(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "src/app.py", "import os\n\ndef main():\n    print('hi')\n    return 0\n");
    mput(&m, "old.txt", "bye\n");
    mput(&m, "name.txt", "one\ntwo\n");

    CHECK_OK(apply(&m,
                   "*** Begin Patch\n"
                   "*** Add File: docs/new.md\n"
                   "+# Title\n"
                   "+\n"
                   "+body\n"
                   "*** Update File: src/app.py\n"
                   "@@ def main():\n"
                   "-    print('hi')\n"
                   "+    print('hello')\n"
                   "     return 0\n"
                   "*** Delete File: old.txt\n"
                   "*** Update File: name.txt\n"
                   "*** Move to: renamed.txt\n"
                   "@@\n"
                   " one\n"
                   "-two\n"
                   "+2\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Created docs/new.md\n"
                              "Updated src/app.py\n"
                              "Deleted old.txt\n"
                              "Updated name.txt\n"
                              "Moved name.txt to renamed.txt");
    CHECK_EQ_INT(res.added, 1);
    CHECK_EQ_INT(res.updated, 2);
    CHECK_EQ_INT(res.deleted, 1);
    CHECK_EQ_INT(res.moved, 1);
    CHECK_EQ_INT(res.fuzzy_hunks, 0);
    CHECK_EQ_STR(mget(&m, "docs/new.md"), "# Title\n\nbody\n");
    CHECK_EQ_STR(mget(&m, "src/app.py"),
                 "import os\n\ndef main():\n    print('hello')\n    return 0\n");
    CHECK(mfind(&m, "old.txt") == NULL);
    CHECK(mfind(&m, "name.txt") == NULL);
    CHECK_EQ_STR(mget(&m, "renamed.txt"), "one\n2\n");
    CHECK_EQ_INT(m.commits, 1);
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_multiple_hunks_and_anchors(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "a.py",
         "class A:\n"
         "    def f(self):\n"
         "        return 1\n"
         "\n"
         "class B:\n"
         "    def f(self):\n"
         "        return 1\n"
         "\n"
         "def tail():\n"
         "    return 1\n");
    /* Stacked anchors pick class B's f; a second hunk edits tail(). */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n"
                   "*** Update File: a.py\n"
                   "@@ class B:\n"
                   "@@     def f(self):\n"
                   "-        return 1\n"
                   "+        return 2\n"
                   "@@ def tail():\n"
                   "-    return 1\n"
                   "+    return 3\n"
                   "*** End Patch",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "a.py"), "class A:\n"
                                   "    def f(self):\n"
                                   "        return 1\n"
                                   "\n"
                                   "class B:\n"
                                   "    def f(self):\n"
                                   "        return 2\n"
                                   "\n"
                                   "def tail():\n"
                                   "    return 3\n");
    sbx_patch_result_release(&res);

    /* With two anchors, each must be found. */
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: a.py\n@@ class C:\n@@     def f(self):\n"
                    "-        return 2\n+        return 5\n*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "'class C:' of its '@@' header was not found");
    /* A single anchor that is not found is only advisory: the context decides. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: a.py\n@@ def nowhere():\n"
                   "-    return 3\n+    return 4\n*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_CONTAINS(mget(&m, "a.py"), "def tail():\n    return 4\n");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_crlf_and_final_newline(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "win.txt", "one\r\ntwo\r\nthree\r\n");
    mput(&m, "nonl.txt", "alpha\nbeta");
    mput(&m, "mixed.txt", "a\r\nb\nc\r\nd\r\n");
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n"
                   "*** Update File: win.txt\n"
                   " one\n"
                   "-two\n"
                   "+TWO\n"
                   "+2.5\n"
                   " three\n"
                   "*** Update File: nonl.txt\n"
                   "@@\n"
                   "-beta\n"
                   "+BETA\n"
                   "*** Update File: mixed.txt\n"
                   " b\n"
                   "+b2\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "win.txt"), "one\r\nTWO\r\n2.5\r\nthree\r\n");
    CHECK_EQ_STR(mget(&m, "nonl.txt"), "alpha\nBETA");
    /* Untouched lines keep their own ending; new lines take the dominant one (CRLF). */
    CHECK_EQ_STR(mget(&m, "mixed.txt"), "a\r\nb\nb2\r\nc\r\nd\r\n");
    sbx_patch_result_release(&res);

    /* A patch sent with CRLF line ends applies the same way. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\r\n*** Update File: win.txt\r\n three\r\n+four\r\n"
                   "*** End of File\r\n*** End Patch\r\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "win.txt"), "one\r\nTWO\r\n2.5\r\nthree\r\nfour\r\n");
    sbx_patch_result_release(&res);

    /* Appending at the end of a file without a final newline keeps it without one. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: nonl.txt\n@@\n+gamma\n*** End of File\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "nonl.txt"), "alpha\nBETA\ngamma");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_eof_marker_and_pure_insertions(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "f.txt", "end\nmiddle\nend\n");
    /* "end" occurs twice: the End of File marker picks the last one. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: f.txt\n@@\n-end\n+END\n*** End of File\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "f.txt"), "end\nmiddle\nEND\n");
    sbx_patch_result_release(&res);
    /* A hunk with only + lines under an anchor inserts right after the anchor line. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: f.txt\n@@ middle\n+inserted\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "f.txt"), "end\nmiddle\ninserted\nEND\n");
    sbx_patch_result_release(&res);
    /* Adding to an empty file gives it a final newline. */
    mput(&m, "empty.txt", "");
    CHECK_OK(apply(&m, "*** Begin Patch\n*** Update File: empty.txt\n+x\n*** End Patch\n", NULL,
                   &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "empty.txt"), "x\n");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_fuzzy_whitespace(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "t.c", "int x = 1;   \n\tint y = 2;\nint z = 3;\n");
    /* Trailing spaces in the file, a tab where the patch has spaces: both still match, and
     * matched context lines keep the file's own whitespace. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: t.c\n"
                   " int x = 1;\n"
                   "-    int y = 2;\n"
                   "+\tint y = 20;\n"
                   " int z = 3;\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "t.c"), "int x = 1;   \n\tint y = 20;\nint z = 3;\n");
    CHECK_EQ_INT(res.fuzzy_hunks, 1);
    sbx_patch_result_release(&res);

    /* Typographic punctuation in the file (curly quote, em dash, no-break space) against
     * ASCII in the patch, and the other way round. */
    mput(&m, "doc.md",
         "say \xE2\x80\x9Chi\xE2\x80\x9D \xE2\x80\x94 it\xE2\x80\x99s\xC2\xA0ok\n"
         "plain 'x' - y\n");
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: doc.md\n"
                   "-say \"hi\" - it's ok\n+say hello\n"
                   " plain \xE2\x80\x98x\xE2\x80\x99 \xE2\x80\x93 y\n+end\n*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "doc.md"), "say hello\nplain 'x' - y\nend\n");
    CHECK_EQ_INT(res.fuzzy_hunks, 1);
    sbx_patch_result_release(&res);
    /* Folding is only for punctuation: other characters still have to match. */
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: doc.md\n-say h\xC3\xA9llo\n*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "the line 'say h\xC3\xA9llo' was not found");
    mem_release(&m);
}

static void test_failure_leaves_everything_untouched(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "a.txt", "a1\na2\n");
    mput(&m, "b.txt", "b1\nb2\nb3\n");
    mput(&m, "c.txt", "c\n");
    memset(&res, 0, sizeof(res));
    CHECK_ERR(
            apply(&m,
                  "*** Begin Patch\n"
                  "*** Update File: a.txt\n-a1\n+A1\n"
                  "*** Delete File: c.txt\n"
                  "*** Add File: d.txt\n+d\n"
                  "*** Update File: b.txt\n"
                  " b1\n"
                  "-b2 changed\n"
                  "+B2\n"
                  "*** End Patch\n",
                  NULL, &res, &err),
            SBX_E_INVAL, &err,
            "cannot update 'b.txt': hunk 1 does not match (Invalid Context): line 2 is 'b2', the patch expects "
            "'b2 changed' (no file was changed)");
    CHECK(res.summary == NULL);
    CHECK_EQ_INT(m.commits, 0);
    CHECK_EQ_STR(mget(&m, "a.txt"), "a1\na2\n");
    CHECK_EQ_STR(mget(&m, "c.txt"), "c\n");
    CHECK(mfind(&m, "d.txt") == NULL);

    /* A first context line that is nowhere in the file is quoted as such. */
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Update File: a.txt\n-zzz\n+y\n*** End Patch\n", NULL,
                    &res, &err),
              SBX_E_INVAL, &err,
              "hunk 1 does not match (Invalid Context): the line 'zzz' was not found");
    /* The second hunk searches after the first one. */
    CHECK_ERR(
            apply(&m,
                  "*** Begin Patch\n*** Update File: b.txt\n@@\n-b2\n+x\n@@\n-b1\n+y\n"
                  "*** End Patch\n",
                  NULL, &res, &err),
            SBX_E_INVAL, &err,
            "hunk 2 does not match (Invalid Context): the line 'b1' was not found after line 2 (it is at line 1: "
            "hunks must follow the order of the file)");
    /* Context running past the end of the file. */
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Update File: b.txt\n b2\n b3\n-b4\n*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "the file ends at line 3, the patch expects 'b4'");
    /* A binary file is not patched. */
    struct mfile *bin = &m.files[m.n++];
    bin->path = strdup("bin.dat");
    bin->data = malloc(4);
    memcpy(bin->data, "a\0b\n", 4);
    bin->len = 4;
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Update File: bin.dat\n-a\n*** End Patch\n", NULL,
                    &res, &err),
              SBX_E_INVAL, &err, "cannot update 'bin.dat': it is a binary file");
    /* Missing files, and a commit that fails. */
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Update File: nope.txt\n-x\n*** End Patch\n", NULL,
                    &res, &err),
              SBX_E_NOTFOUND, &err, "cannot update 'nope.txt': no such file");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch\n", NULL, &res,
                    &err),
              SBX_E_NOTFOUND, &err, "cannot delete 'nope.txt': no such file");
    m.fail_commit = 1;
    CHECK_ERR(
            apply(&m, "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch\n", NULL, &res, &err),
            SBX_E_IO, &err, "disk on fire");
    CHECK(res.summary == NULL);
    mem_release(&m);
}

static void test_sequential_ops_on_one_file(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "x.txt", "1\n2\n3\n");
    mput(&m, "dir", NULL);
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n"
                   "*** Update File: x.txt\n-1\n+one\n"
                   "*** Update File: x.txt\n-3\n+three\n"
                   "*** Delete File: x.txt\n"
                   "*** Add File: x.txt\n+fresh\n"
                   "*** Add File: tmp.txt\n+t\n"
                   "*** Delete File: tmp.txt\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "x.txt"), "fresh\n");
    CHECK(mfind(&m, "tmp.txt") == NULL);
    sbx_patch_result_release(&res);
    /* The second update sees the first one's result. */
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: x.txt\n-fresh\n+a\n"
                    "*** Update File: x.txt\n-fresh\n+b\n*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "the line 'fresh' was not found");
    CHECK_ERR(
            apply(&m, "*** Begin Patch\n*** Add File: dir\n+x\n*** End Patch\n", NULL, &res, &err),
            SBX_E_INVAL, &err, "cannot create 'dir': it is a directory");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Add File: x.txt/y\n+x\n*** End Patch\n", NULL, &res,
                    &err),
              SBX_E_INVAL, &err, "cannot write 'x.txt/y': 'x.txt' is not a directory");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Delete File: dir\n*** End Patch\n", NULL, &res, &err),
              SBX_E_INVAL, &err, "cannot delete 'dir': it is a directory");
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: x.txt\n*** Move to: dir\n-fresh\n+f\n"
                    "*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "cannot move 'x.txt' to 'dir': it is a directory");
    /* A pure rename (no hunks) and a move onto the same path. */
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: x.txt\n*** Move to: y.txt\n*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Updated x.txt\nMoved x.txt to y.txt");
    CHECK_EQ_STR(mget(&m, "y.txt"), "fresh\n");
    CHECK(mfind(&m, "x.txt") == NULL);
    sbx_patch_result_release(&res);
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: y.txt\n*** Move to: ./y.txt\n-fresh\n+f\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Updated y.txt");
    CHECK_EQ_STR(mget(&m, "y.txt"), "f\n");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_paths(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    struct sbx_patch_options opts;
    mem_init(&m);
    mput(&m, "tasks/a/f.txt", "x\n");

    CHECK_ERR(
            apply(&m, "*** Begin Patch\n*** Add File: ../x\n+x\n*** End Patch\n", NULL, &res, &err),
            SBX_E_INVAL, &err, "line 2: '*** Add File:': path '../x' must not contain '..'");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch\n", NULL,
                    &res, &err),
              SBX_E_INVAL, &err, "path '/etc/passwd' must be relative to the workspace");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Add File: a/../../b\n+x\n*** End Patch\n", NULL, &res,
                    &err),
              SBX_E_INVAL, &err, "'..'");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Add File:   \n+x\n*** End Patch\n", NULL, &res, &err),
              SBX_E_PARSE, &err, "missing path");
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: tasks/a/f.txt\n*** Move to: ../../x\n-x\n"
                    "*** End Patch\n",
                    NULL, &res, &err),
              SBX_E_INVAL, &err, "'*** Move to:'");
    CHECK_EQ_INT(m.commits, 0);

    /* With a root, absolute paths inside it work and outside it do not; cwd anchors relative
     * paths and the summary shows them as written. Backslashes are separators. */
    memset(&opts, 0, sizeof(opts));
    opts.root = "/workspace";
    opts.cwd = "tasks/a";
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch\n", &opts,
                    &res, &err),
              SBX_E_INVAL, &err, "/etc/passwd");
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: f.txt\n-x\n+y\n"
                   "*** Add File: /workspace/top.txt\n+t\n"
                   "*** Add File: sub\\g.txt\n+g\n*** End Patch\n",
                   &opts, &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Updated f.txt\nCreated top.txt\nCreated sub/g.txt");
    CHECK_EQ_STR(mget(&m, "tasks/a/f.txt"), "y\n");
    CHECK_EQ_STR(mget(&m, "top.txt"), "t\n");
    CHECK_EQ_STR(mget(&m, "tasks/a/sub/g.txt"), "g\n");
    sbx_patch_result_release(&res);

    /* The parsed operations can be inspected before applying (approvals). */
    struct sbx_patch *p = NULL;
    const char *path, *to;
    const char *text = "*** Begin Patch\n*** Update File: f.txt\n*** Move to: g.txt\n"
                       "*** Delete File: h.txt\n*** End Patch\n";
    CHECK_OK(sbx_patch_parse(text, strlen(text), &opts, &p, &err), &err);
    CHECK_EQ_INT(sbx_patch_count(p), 2);
    CHECK_EQ_INT(sbx_patch_op(p, 0, &path, &to), SBX_PATCH_UPDATE);
    CHECK_EQ_STR(path, "tasks/a/f.txt");
    CHECK_EQ_STR(to, "tasks/a/g.txt");
    CHECK_EQ_INT(sbx_patch_op(p, 1, &path, &to), SBX_PATCH_DELETE);
    CHECK_EQ_STR(path, "tasks/a/h.txt");
    CHECK(to == NULL);
    sbx_patch_free(p);
    mem_release(&m);
}

static void test_malformed(void)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
            {"", "patch is empty: it must start with '*** Begin Patch'"},
            {"hello\n", "patch must start with '*** Begin Patch', not 'hello'"},
            {"*** Begin Patch\n*** Add File: a\n+x\n", "patch must end with '*** End Patch'"},
            {"*** Begin Patch\n*** End Patch\n", "patch has no file operations"},
            {"*** Begin Patch\n*** Create File: a\n*** End Patch\n",
             "line 2: expected '*** Add File: <path>', '*** Delete File: <path>' or '*** Update File: "
             "<path>', not '*** Create File: a'"},
            {"*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch\n",
             "line 4: 'y' in added file 'a' does not start with '+'"},
            {"*** Begin Patch\n*** Delete File: a\n-x\n*** End Patch\n",
             "line 3: delete of 'a' must not have a body"},
            {"*** Begin Patch\n*** Update File: a\n*** End Patch\n", "update of 'a' has no hunks"},
            {"*** Begin Patch\n*** Update File: a\n@@ f\n*** End Patch\n",
             "line 3: hunk 1 of 'a' has no lines"},
            {"*** Begin Patch\n*** Update File: a\n@@\n x\nbad\n*** End Patch\n",
             "line 5: 'bad' in the update of 'a' must start with ' ' (context), '-' (remove) or '+' "
             "(add)"},
            {"*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch\n",
             "line 3: '*** End of File' must follow the lines of a hunk"},
            {"*** Begin Patch\n*** Update File: a\n@@\n-x\n*** End of File\n+y\n*** End Patch\n",
             "line 6: lines after '*** End of File' in the update of 'a' must start a new hunk"},
            {"*** Begin Patch\n*** Update File: a\n@@\n-x\n*** Frobnicate\n*** End Patch\n",
             "line 5: unexpected '*** Frobnicate' in the update of 'a'"},
            {"*** Begin Patch\n*** Add File: a\n+x\0y\n*** End Patch\n", NULL},
    };
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        if (!cases[i].msg)
            continue;
        CHECK_ERR(apply(&m, cases[i].text, NULL, &res, &err), SBX_E_PARSE, &err, cases[i].msg);
    }
    const char nul[] = "*** Begin Patch\n*** Add File: a\n+x\0y\n*** End Patch\n";
    CHECK_ERR(sbx_patch_apply_text(nul, sizeof(nul) - 1, &m.fs, NULL, &res, &err), SBX_E_PARSE,
              &err, "NUL byte");
    CHECK_EQ_INT(m.commits, 0);
    mem_release(&m);
}

static void test_lenient_envelope(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    mput(&m, "a.txt", "1\n2\n3\n4\n");
    /* Blank lines around everything, padded markers, a blank line between hunks. */
    CHECK_OK(apply(&m,
                   "\n\n  *** Begin Patch  \n\n*** Update File:   a.txt  \n@@\n-1\n+one\n\n"
                   "@@\n-4\n+four\n\n   *** End Patch   \n\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "a.txt"), "one\n2\n3\nfour\n");
    sbx_patch_result_release(&res);
    /* A heredoc wrapper. */
    CHECK_OK(apply(&m, "<<'EOF'\n*** Begin Patch\n*** Add File: h.txt\n+h\n*** End Patch\nEOF\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "h.txt"), "h\n");
    sbx_patch_result_release(&res);
    /* A context line that itself starts with "***" after its space is content, not a marker. */
    mput(&m, "md.txt", "a\n*** Add File: x\nb\n");
    CHECK_OK(apply(&m,
                   "*** Begin Patch\n*** Update File: md.txt\n a\n *** Add File: x\n-b\n+B\n"
                   "*** End Patch\n",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "md.txt"), "a\n*** Add File: x\nB\n");
    sbx_patch_result_release(&res);
    /* An added empty file. */
    CHECK_OK(apply(&m, "*** Begin Patch\n*** Add File: empty\n*** End Patch\n", NULL, &res, &err),
             &err);
    CHECK_EQ_STR(mget(&m, "empty"), "");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_limits(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    struct sbx_patch_options opts;
    struct sbx_buf b;
    mem_init(&m);
    memset(&opts, 0, sizeof(opts));

    opts.limits.max_patch_bytes = 64;
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Add File: a.txt\n+0123456789012345678901234567890\n"
                    "*** End Patch\n",
                    &opts, &res, &err),
              SBX_E_TOOBIG, &err, "patch is larger than 64 bytes");
    memset(&opts, 0, sizeof(opts));
    opts.limits.max_line_bytes = 8;
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n", &opts, &res, &err),
              SBX_E_TOOBIG, &err, "line 1 of the patch is longer than 8 bytes");
    memset(&opts, 0, sizeof(opts));
    opts.limits.max_files = 2;
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Add File: a\n*** Add File: b\n*** Add File: c\n"
                    "*** End Patch\n",
                    &opts, &res, &err),
              SBX_E_TOOBIG, &err, "patch touches more than 2 files");
    memset(&opts, 0, sizeof(opts));
    opts.limits.max_hunks = 2;
    mput(&m, "h.txt", "1\n2\n3\n");
    CHECK_ERR(apply(&m,
                    "*** Begin Patch\n*** Update File: h.txt\n@@\n-1\n@@\n-2\n@@\n-3\n"
                    "*** End Patch\n",
                    &opts, &res, &err),
              SBX_E_TOOBIG, &err, "patch has more than 2 hunks");
    memset(&opts, 0, sizeof(opts));
    opts.limits.max_file_bytes = 4;
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Update File: h.txt\n-1\n*** End Patch\n", &opts, &res,
                    &err),
              SBX_E_TOOBIG, &err, "cannot read 'h.txt'");
    CHECK_ERR(apply(&m, "*** Begin Patch\n*** Add File: big\n+12345\n*** End Patch\n", &opts, &res,
                    &err),
              SBX_E_TOOBIG, &err, "cannot create 'big'");

    /* A huge patch (many files, hunks, a long line) is refused by the defaults before any
     * work is done. */
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_buf_adds(&b, "*** Begin Patch\n", &err), &err);
    for (int i = 0; i < 600 && sbx_buf_addf(&b, &err, "*** Add File: f%d\n+x\n", i) == 0; i++)
        ;
    CHECK_OK(sbx_buf_adds(&b, "*** End Patch\n", &err), &err);
    memset(&res, 0, sizeof(res));
    CHECK_ERR(sbx_patch_apply_text(b.data, b.len, &m.fs, NULL, &res, &err), SBX_E_TOOBIG, &err,
              "more than 512 files");
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_adds(&b, "*** Begin Patch\n*** Add File: f\n+", &err), &err);
    CHECK_OK(sbx_buf_reserve(&b, 300 * 1024, &err), &err);
    memset(b.data + b.len, 'x', 300 * 1024);
    sbx_buf_setlen(&b, b.len + 300 * 1024);
    CHECK_OK(sbx_buf_adds(&b, "\n*** End Patch\n", &err), &err);
    CHECK_ERR(sbx_patch_apply_text(b.data, b.len, &m.fs, NULL, &res, &err), SBX_E_TOOBIG, &err,
              "line 3 of the patch is longer than");
    sbx_buf_release(&b);
    CHECK_EQ_INT(m.commits, 0);
    mem_release(&m);
}

static void test_ops_form(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    struct sbx_patch *p = NULL;
    mem_init(&m);
    mput(&m, "u.txt", "keep\nold\n");
    mput(&m, "gone.txt", "bye\n");
    const char *create = "+line one\n+line two\n";
    const char *update = "@@\n keep\n-old\n+new\n";
    struct sbx_patch_op_spec ops[] = {
            {SBX_PATCH_ADD, "c.txt", NULL, create, strlen(create)},
            {SBX_PATCH_UPDATE, "u.txt", "moved.txt", update, strlen(update)},
            {SBX_PATCH_DELETE, "gone.txt", NULL, NULL, 0},
    };
    CHECK_OK(sbx_patch_from_ops(ops, 3, NULL, &p, &err), &err);
    memset(&res, 0, sizeof(res));
    CHECK_OK(sbx_patch_apply(p, &m.fs, NULL, &res, &err), &err);
    CHECK_EQ_STR(res.summary,
                 "Created c.txt\nUpdated u.txt\nMoved u.txt to moved.txt\nDeleted gone.txt");
    /* create_file joins its lines: no final newline without a bare "+" last line. */
    CHECK_EQ_STR(mget(&m, "c.txt"), "line one\nline two");
    CHECK_EQ_STR(mget(&m, "moved.txt"), "keep\nnew\n");
    CHECK(mfind(&m, "gone.txt") == NULL);
    sbx_patch_result_release(&res);
    sbx_patch_free(p);
    p = NULL;

    /* The same atomicity: a bad second operation leaves the first one unapplied. */
    const char *bad = "@@\n-missing\n+x\n";
    struct sbx_patch_op_spec ops2[] = {
            {SBX_PATCH_ADD, "d.txt", NULL, create, strlen(create)},
            {SBX_PATCH_UPDATE, "c.txt", NULL, bad, strlen(bad)},
    };
    CHECK_OK(sbx_patch_from_ops(ops2, 2, NULL, &p, &err), &err);
    CHECK_ERR(
            sbx_patch_apply(p, &m.fs, NULL, &res, &err), SBX_E_INVAL, &err,
            "cannot update 'c.txt': hunk 1 does not match (Invalid Context): the line 'missing' was not found");
    CHECK(mfind(&m, "d.txt") == NULL);
    sbx_patch_free(p);
    p = NULL;

    const char *notplus = "+a\nb\n";
    struct sbx_patch_op_spec ops3[] = {
            {SBX_PATCH_DELETE, "gone.txt", NULL, NULL, 0},
            {SBX_PATCH_ADD, "e.txt", NULL, notplus, strlen(notplus)},
    };
    CHECK_ERR(sbx_patch_from_ops(ops3, 2, NULL, &p, &err), SBX_E_PARSE, &err,
              "operation 2 (create_file 'e.txt'): line 2: 'b' in the new file 'e.txt' does not "
              "start with '+'");
    struct sbx_patch_op_spec ops4[] = {{SBX_PATCH_UPDATE, "u.txt", NULL, NULL, 0}};
    CHECK_ERR(sbx_patch_from_ops(ops4, 1, NULL, &p, &err), SBX_E_PARSE, &err,
              "update_file of 'u.txt' has no diff");
    struct sbx_patch_op_spec ops5[] = {{SBX_PATCH_DELETE, "../etc", NULL, NULL, 0}};
    CHECK_ERR(sbx_patch_from_ops(ops5, 1, NULL, &p, &err), SBX_E_INVAL, &err,
              "operation 1 (delete_file '../etc'): path '../etc' must not contain '..'");
    CHECK_ERR(sbx_patch_from_ops(ops5, 0, NULL, &p, &err), SBX_E_PARSE, &err, "no operations");
    CHECK(p == NULL);
    mem_release(&m);
}

/* The final newline of create_file operations, as the Responses API's own tool writes it. */
static void test_create_file_newline(void)
{
    static const struct {
        const char *diff, *want;
    } cases[] = {
            {"+a\n+b\n+", "a\nb\n"},              /* a bare "+" last line: the final newline */
            {"+a\n+b\n+\n", "a\nb\n"},            /* ... also when it is newline-terminated */
            {"+a\n+b", "a\nb"},                   /* none */
            {"+hello\n+world\n", "hello\nworld"}, /* a diff's own final newline is no line */
            {"+\n+", "\n"},                       /* an empty line and the final newline */
            {"+", ""},                            /* a bare "+" alone: an empty file */
            {"", ""},
            {"+a\r\n+b\r\n+\r\n", "a\r\nb\r\n"}, /* CRLF patches make CRLF files */
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        struct memfs m;
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_patch_result res;
        struct sbx_patch *p = NULL;
        struct sbx_patch_op_spec op = {SBX_PATCH_ADD, "n.txt", NULL, cases[i].diff,
                                       strlen(cases[i].diff)};
        mem_init(&m);
        memset(&res, 0, sizeof(res));
        CHECK_OK(sbx_patch_from_ops(&op, 1, NULL, &p, &err), &err);
        CHECK_OK(sbx_patch_apply(p, &m.fs, NULL, &res, &err), &err);
        CHECK_EQ_STR(mget(&m, "n.txt"), cases[i].want);
        sbx_patch_result_release(&res);
        sbx_patch_free(p);
        mem_release(&m);
    }
    /* "*** Add File" in patch text keeps ending every line, as Codex does. */
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    mem_init(&m);
    CHECK_OK(apply(&m, "*** Begin Patch\n*** Add File: t.txt\n+a\n+b\n*** End Patch\n", NULL, &res,
                   &err),
             &err);
    CHECK_EQ_STR(mget(&m, "t.txt"), "a\nb\n");
    sbx_patch_result_release(&res);
    mem_release(&m);
}

static void test_json_ops(void)
{
    struct memfs m;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    struct sbx_patch *p = NULL;
    json_t *v = NULL;
    mem_init(&m);
    mput(&m, "u.txt", "a\n");
    mput(&m, "gone", "g\n");

    /* The reference's custom tool reads text starting with '{' or '[' as JSON. */
    CHECK_OK(apply(&m,
                   "  {\"operations\": [{\"type\": \"create_file\", \"path\": \"j.txt\", "
                   "\"diff\": \"+j\\n\"}, {\"type\": \"delete_file\", \"path\": \"gone\"}]}",
                   NULL, &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Created j.txt\nDeleted gone");
    CHECK_EQ_STR(mget(&m, "j.txt"), "j");
    sbx_patch_result_release(&res);
    CHECK_OK(
            apply(&m,
                  "[{\"type\": \"update_file\", \"path\": \"u.txt\", \"diff\": \"@@\\n-a\\n+b\\n\", "
                  "\"move_to\": \"v.txt\"}]",
                  NULL, &res, &err),
            &err);
    CHECK_EQ_STR(mget(&m, "v.txt"), "b\n");
    sbx_patch_result_release(&res);

    /* An apply_patch_call item's operation. */
    const char *item = "{\"type\": \"apply_patch_call\", \"call_id\": \"c1\", \"status\": "
                       "\"completed\", \"operation\": {\"type\": \"delete_file\", \"path\": "
                       "\"j.txt\"}}";
    CHECK_OK(sbx_json_parse(item, strlen(item), NULL, &v, &err), &err);
    CHECK_OK(sbx_patch_from_json(v, NULL, &p, &err), &err);
    CHECK_EQ_INT(sbx_patch_count(p), 1);
    CHECK_EQ_INT(sbx_patch_op(p, 0, NULL, NULL), SBX_PATCH_DELETE);
    sbx_patch_free(p);
    p = NULL;
    json_decref(v);

    CHECK_ERR(apply(&m, "{\"type\": \"rename_file\", \"path\": \"a\"}", NULL, &res, &err),
              SBX_E_PARSE, &err,
              "operation 1: type must be 'create_file', 'update_file' or 'delete_file', not "
              "'rename_file'");
    CHECK_ERR(apply(&m, "[{\"type\": \"delete_file\", \"path\": \"v.txt\"}, 1]", NULL, &res, &err),
              SBX_E_PARSE, &err, "operation 2 must be an object, not integer");
    CHECK_ERR(apply(&m, "{\"type\": \"create_file\"}", NULL, &res, &err), SBX_E_INVAL, &err,
              "operation 1: missing required field 'path'");
    CHECK_ERR(apply(&m, "{\"type\": \"create_file\", \"path\": 7}", NULL, &res, &err), SBX_E_INVAL,
              &err, "operation 1: field 'path' must be a string");
    CHECK_ERR(apply(&m, "[]", NULL, &res, &err), SBX_E_PARSE, &err, "no operations to apply");
    CHECK_ERR(apply(&m, "{\"operations\": [", NULL, &res, &err), SBX_E_PARSE, &err,
              "patch operations (JSON)");
    CHECK_EQ_STR(mget(&m, "v.txt"), "b\n");
    mem_release(&m);
}

/* Property check: random files with unique lines, random non-overlapping edits written as
 * V4A hunks with up to three context lines; the patched text must equal the edit applied
 * directly. Deterministic (fixed seed). */
static unsigned long prng_state = 12345;

static unsigned prng(unsigned n)
{
    prng_state = prng_state * 6364136223846793005UL + 1442695040888963407UL;
    return (unsigned)(prng_state >> 33) % n;
}

static void add_lines(struct sbx_buf *b, struct sbx_strv *lines, const char *nl, int final_nl)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (size_t i = 0; i < lines->n; i++)
        if (sbx_buf_addf(b, &err, "%s%s", lines->v[i], i + 1 < lines->n || final_nl ? nl : "") < 0)
            return;
}

static void test_random_edits(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int bad = 0, hunks_total = 0;
    for (int round = 0; round < 400 && !bad; round++) {
        struct sbx_strv orig, want;
        struct sbx_buf file, diff, wanted;
        unsigned nlines = 1 + prng(40), pos = 0;
        int final_nl = prng(5) != 0;
        /* One unterminated line has no ending to keep: it would take the patch's (LF). */
        int crlf = prng(4) == 0 && (nlines > 1 || final_nl);
        const char *nl = crlf ? "\r\n" : "\n";
        int hunks = 0;
        sbx_strv_init(&orig);
        sbx_strv_init(&want);
        sbx_buf_init(&file, SBX_BUF_NOLIMIT);
        sbx_buf_init(&diff, SBX_BUF_NOLIMIT);
        sbx_buf_init(&wanted, SBX_BUF_NOLIMIT);
        for (unsigned i = 0; i < nlines; i++)
            sbx_strv_pushf(&orig, "line %u of %d", i, round);
        add_lines(&file, &orig, nl, final_nl);
        while (pos < nlines) {
            unsigned avail = nlines - pos;
            if (prng(3)) {
                sbx_strv_push(&want, orig.v[pos++]);
                continue;
            }
            unsigned before = prng(4), del = prng(4), ins = prng(4), after = prng(4);
            if (before > avail)
                before = avail;
            if (del > avail - before)
                del = avail - before;
            if (before + del == 0)
                before = 1;
            if (after > avail - before - del)
                after = avail - before - del;
            (void)sbx_buf_addf(&diff, &err, "@@\n");
            for (unsigned k = 0; k < before; k++, pos++) {
                (void)sbx_buf_addf(&diff, &err, " %s\n", orig.v[pos]);
                sbx_strv_push(&want, orig.v[pos]);
            }
            for (unsigned k = 0; k < del; k++, pos++)
                (void)sbx_buf_addf(&diff, &err, "-%s\n", orig.v[pos]);
            for (unsigned k = 0; k < ins; k++) {
                (void)sbx_buf_addf(&diff, &err, "+new %u.%u\n", pos, k);
                sbx_strv_pushf(&want, "new %u.%u", pos, k);
            }
            for (unsigned k = 0; k < after; k++, pos++) {
                (void)sbx_buf_addf(&diff, &err, " %s\n", orig.v[pos]);
                sbx_strv_push(&want, orig.v[pos]);
            }
            hunks++;
        }
        add_lines(&wanted, &want, nl, final_nl);
        if (hunks) {
            char *out = NULL;
            size_t len = 0;
            int rc = sbx_patch_apply_diff(file.data, file.len, diff.data, diff.len, "r", NULL, &out,
                                          &len, NULL, &err);
            if (rc < 0 || len != wanted.len || memcmp(out, wanted.data, len)) {
                bad = 1;
                printf("# round %d failed (rc %d: %s)\n# file:\n%s\n# diff:\n%s\n# want:\n%s\n# "
                       "got:\n%s\n",
                       round, rc, err.msg, file.data, diff.data, wanted.data, out ? out : "");
            }
            free(out);
            hunks_total += hunks;
        }
        sbx_strv_release(&orig);
        sbx_strv_release(&want);
        sbx_buf_release(&file);
        sbx_buf_release(&diff);
        sbx_buf_release(&wanted);
    }
    CHECK(!bad);
    CHECK(hunks_total > 500);
}

static void test_apply_diff(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *out = NULL;
    size_t len = 0, fuzzy = 9;
    const char *old = "a\r\nb\r\nc\r\n";
    const char *diff = "@@\n a\n-b\n+B\n";
    CHECK_OK(sbx_patch_apply_diff(old, strlen(old), diff, strlen(diff), "f", NULL, &out, &len,
                                  &fuzzy, &err),
             &err);
    CHECK_EQ_STR(out, "a\r\nB\r\nc\r\n");
    CHECK_EQ_INT(len, strlen("a\r\nB\r\nc\r\n"));
    CHECK_EQ_INT(fuzzy, 0);
    free(out);
    out = NULL;
    const char *diff2 = "@@\n-zz\n";
    CHECK_ERR(sbx_patch_apply_diff(old, strlen(old), diff2, strlen(diff2), "label.txt", NULL, &out,
                                   &len, NULL, &err),
              SBX_E_INVAL, &err, "cannot update 'label.txt'");
    CHECK(out == NULL);
    /* Context that ends with an empty line standing for the final newline. */
    const char *old2 = "x\ny\n";
    const char *diff3 = "@@\n x\n-y\n+z\n \n";
    CHECK_OK(sbx_patch_apply_diff(old2, strlen(old2), diff3, strlen(diff3), "f", NULL, &out, &len,
                                  NULL, &err),
             &err);
    CHECK_EQ_STR(out, "x\nz\n");
    free(out);
}

/* ---- the directory provider, on a real directory --------------------------------------------- */

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>

#include "capability/patch-internal.h"
#include "sbx/fs.h"

static char tmpdir[64], ws[96], outside[96];
static int wsfd = -1;

static void put(const char *dir, const char *name, const char *data)
{
    char *p = sbx_xasprintf("%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(data, f);
        fclose(f);
    }
    free(p);
}

/* The file's content (static buffer), or NULL when it does not exist. */
static const char *get(const char *dir, const char *name)
{
    static char buf[4096];
    char *p = sbx_xasprintf("%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    free(p);
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static unsigned mode_of(const char *name)
{
    struct stat st;
    char *p = sbx_xasprintf("%s/%s", ws, name);
    int r = lstat(p, &st);
    free(p);
    return r == 0 ? (unsigned)(st.st_mode & 07777) : 0;
}

/* Count leftover ".sbx-patch-*" files below dir. */
static int leftovers(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d)
        return 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (!strncmp(e->d_name, ".sbx-patch-", 11))
            n++;
        if (e->d_type == DT_DIR) {
            char *sub = sbx_xasprintf("%s/%s", dir, e->d_name);
            n += leftovers(sub);
            free(sub);
        }
    }
    closedir(d);
    return n;
}

static int dir_apply(const char *text, struct sbx_patch_result *res, struct sbx_error *err)
{
    struct sbx_patch_fs fs;
    sbx_patch_fs_init_dirfd(&fs, wsfd);
    memset(res, 0, sizeof(*res));
    return sbx_patch_apply_text(text, strlen(text), &fs, NULL, res, err);
}

static int dir_setup(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int fd = -1;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sbx-test-patch-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(ws, sizeof(ws), "%s/ws", tmpdir);
    snprintf(outside, sizeof(outside), "%s/outside", tmpdir);
    mkdir(ws, 0755);
    mkdir(outside, 0755);
    wsfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sbx_fs_open(wsfd, "", O_RDONLY | O_DIRECTORY, 0, 0, &fd, &err) < 0) {
        CHECK_OK(-1, &err);
        return -1;
    }
    close(fd);
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* Plain nftw rather than sbx_fs_remove: the teardown must not depend on the code under test. */
static void dir_teardown(void)
{
    if (wsfd >= 0)
        close(wsfd);
    wsfd = -1;
    CHECK(nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
}

static void test_dir_apply(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    put(ws, "run.sh", "#!/bin/sh\necho one\n");
    char *script = sbx_xasprintf("%s/run.sh", ws);
    CHECK(chmod(script, 0755) == 0);
    free(script);
    put(ws, "gone.txt", "bye\n");
    put(ws, "win.txt", "a\r\nb\r\n");
    CHECK_OK(dir_apply("*** Begin Patch\n"
                       "*** Update File: run.sh\n-echo one\n+echo two\n"
                       "*** Add File: deep/er/new.txt\n+new\n"
                       "*** Delete File: gone.txt\n"
                       "*** Update File: win.txt\n*** Move to: sub/win2.txt\n a\n+a2\n"
                       "*** End Patch\n",
                       &res, &err),
             &err);
    CHECK_EQ_STR(res.summary, "Updated run.sh\nCreated deep/er/new.txt\nDeleted gone.txt\n"
                              "Updated win.txt\nMoved win.txt to sub/win2.txt");
    CHECK_EQ_STR(get(ws, "run.sh"), "#!/bin/sh\necho two\n");
    CHECK_EQ_INT(mode_of("run.sh"), 0755);
    CHECK_EQ_STR(get(ws, "deep/er/new.txt"), "new\n");
    CHECK_EQ_INT(mode_of("deep/er/new.txt"), 0644);
    CHECK(get(ws, "gone.txt") == NULL);
    CHECK(get(ws, "win.txt") == NULL);
    CHECK_EQ_STR(get(ws, "sub/win2.txt"), "a\r\na2\r\nb\r\n");
    CHECK_EQ_INT(leftovers(ws), 0);
    sbx_patch_result_release(&res);

    /* A privileged harness keeps the owner of what it replaces and gives new files their
     * directory's owner. */
    if (geteuid() == 0) {
        char *f = sbx_xasprintf("%s/owned.txt", ws), *d = sbx_xasprintf("%s/sub", ws);
        struct stat st;
        put(ws, "owned.txt", "x\n");
        CHECK(chown(f, 1234, 1235) == 0);
        CHECK(chown(d, 2345, 2346) == 0);
        CHECK_OK(dir_apply("*** Begin Patch\n*** Update File: owned.txt\n-x\n+y\n"
                           "*** Add File: sub/fresh.txt\n+z\n*** End Patch\n",
                           &res, &err),
                 &err);
        CHECK(stat(f, &st) == 0 && st.st_uid == 1234 && st.st_gid == 1235);
        free(f);
        f = sbx_xasprintf("%s/sub/fresh.txt", ws);
        CHECK(stat(f, &st) == 0 && st.st_uid == 2345 && st.st_gid == 2346);
        free(f);
        free(d);
        sbx_patch_result_release(&res);
    }
}

/* A patch never leaves a setuid or setgid file: the harness may be root and the workspace
 * root's, so an updated file drops the bits its old version had. */
static void test_dir_no_setuid(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    put(ws, "suid.sh", "#!/bin/sh\necho one\n");
    char *f = sbx_xasprintf("%s/suid.sh", ws);
    CHECK(chmod(f, 06755) == 0);
    free(f);
    CHECK_OK(dir_apply("*** Begin Patch\n*** Update File: suid.sh\n-echo one\n+echo two\n"
                       "*** End Patch\n",
                       &res, &err),
             &err);
    CHECK_EQ_STR(get(ws, "suid.sh"), "#!/bin/sh\necho two\n");
    CHECK_EQ_INT(mode_of("suid.sh"), 0755);
    sbx_patch_result_release(&res);
}

static void test_dir_symlinks_refused(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    char *p;
    put(outside, "secret", "secret\n");
    p = sbx_xasprintf("%s/secret", outside);
    char *l = sbx_xasprintf("%s/link", ws);
    CHECK(symlink(p, l) == 0);
    free(l);
    l = sbx_xasprintf("%s/ldir", ws);
    CHECK(symlink(outside, l) == 0);
    free(l);
    free(p);

    CHECK_ERR(dir_apply("*** Begin Patch\n*** Update File: link\n-secret\n+owned\n*** End Patch\n",
                        &res, &err),
              SBX_E_INVAL, &err, "cannot update 'link': it is a symbolic link");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Delete File: link\n*** End Patch\n", &res, &err),
              SBX_E_INVAL, &err, "cannot delete 'link': it is a symbolic link");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Add File: link\n+owned\n*** End Patch\n", &res, &err),
              SBX_E_INVAL, &err, "cannot create 'link': it is a symbolic link");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Update File: ldir/secret\n-secret\n+owned\n"
                        "*** End Patch\n",
                        &res, &err),
              SBX_E_PERM, &err, "resolves outside the workspace");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Add File: ldir/planted\n+x\n*** End Patch\n", &res,
                        &err),
              SBX_E_PERM, &err, "resolves outside the workspace");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Add File: ok.txt\n+x\n"
                        "*** Update File: run.sh\n*** Move to: ldir/run.sh\n*** End Patch\n",
                        &res, &err),
              SBX_E_PERM, &err, "(no file was changed)");
    CHECK_EQ_STR(get(outside, "secret"), "secret\n");
    CHECK(get(outside, "planted") == NULL);
    CHECK(get(outside, "run.sh") == NULL);
    CHECK(get(ws, "ok.txt") == NULL);
    CHECK_EQ_INT(leftovers(ws), 0);

    char *fifo = sbx_xasprintf("%s/fifo", ws);
    CHECK(mkfifo(fifo, 0644) == 0);
    free(fifo);
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Update File: fifo\n-x\n*** End Patch\n", &res, &err),
              SBX_E_INVAL, &err, "cannot update 'fifo': it is not a regular file");
}

static void test_dir_failure_half_way(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_patch_result res;
    put(ws, "a.txt", "a\n");
    put(ws, "b.txt", "b\n");
    CHECK_ERR(dir_apply("*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n*** Add File: c.txt\n+c\n"
                        "*** Update File: b.txt\n-nope\n+B\n*** End Patch\n",
                        &res, &err),
              SBX_E_INVAL, &err, "cannot update 'b.txt': hunk 1 does not match");
    CHECK_EQ_STR(get(ws, "a.txt"), "a\n");
    CHECK_EQ_STR(get(ws, "b.txt"), "b\n");
    CHECK(get(ws, "c.txt") == NULL);
    CHECK_EQ_INT(leftovers(ws), 0);

    /* The commit itself fails on its second change: the first one is undone. */
    for (int at = 0; at < 3; at++) {
        sbx__patch_fault_after = at;
        CHECK_ERR(dir_apply("*** Begin Patch\n*** Update File: a.txt\n-a\n+A\n"
                            "*** Add File: new/c.txt\n+c\n*** Delete File: b.txt\n"
                            "*** End Patch\n",
                            &res, &err),
                  SBX_E_IO, &err, "patch not applied (rolled back)");
        sbx__patch_fault_after = -1;
        CHECK_EQ_STR(get(ws, "a.txt"), "a\n");
        CHECK_EQ_STR(get(ws, "b.txt"), "b\n");
        CHECK(get(ws, "new/c.txt") == NULL);
        CHECK_EQ_INT(leftovers(ws), 0);
    }
}

static void test_dir(void)
{
    if (dir_setup() < 0) {
        dir_teardown();
        return;
    }
    TAP_RUN(test_dir_apply);
    TAP_RUN(test_dir_no_setuid);
    TAP_RUN(test_dir_symlinks_refused);
    TAP_RUN(test_dir_failure_half_way);
    dir_teardown();
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_add_update_delete_move);
    TAP_RUN(test_multiple_hunks_and_anchors);
    TAP_RUN(test_crlf_and_final_newline);
    TAP_RUN(test_eof_marker_and_pure_insertions);
    TAP_RUN(test_fuzzy_whitespace);
    TAP_RUN(test_failure_leaves_everything_untouched);
    TAP_RUN(test_sequential_ops_on_one_file);
    TAP_RUN(test_paths);
    TAP_RUN(test_malformed);
    TAP_RUN(test_lenient_envelope);
    TAP_RUN(test_limits);
    TAP_RUN(test_ops_form);
    TAP_RUN(test_create_file_newline);
    TAP_RUN(test_json_ops);
    TAP_RUN(test_apply_diff);
    TAP_RUN(test_random_edits);
    test_dir();
    return TAP_DONE();
}

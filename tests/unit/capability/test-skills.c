/* The skills capability's pieces: SKILL.md front matter, scanning hostile host folders (every
 * rule a skill can break is skipped with a warning naming it), matching a name, and the
 * capability's configuration errors. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capability/skills-internal.h"
#include "sbx/buf.h"
#include "sbx/capability.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/log.h"
#include "sbx/skills.h"
#include "tap.h"
#include "rmtree.h"

static char tmp[] = "/tmp/sbx-test-skills.XXXXXX";
static struct sbx_buf logged;

static void capture(enum sbx_log_level level, const char *msg, void *data)
{
    (void)data;
    if (level == SBX_LOG_WARN && sbx_buf_addf(&logged, NULL, "%s\n", msg) < 0)
        abort();
}

static int fm(const char *text, char **name, char **desc, struct sbx_error *err)
{
    return sbx__skill_front_matter(text, strlen(text), "folder", name, desc, err);
}

/* The ten SKILL.md cases of the conformance review, each listed as the reference SDK lists it
 * (skills.py _parse_frontmatter and its defaults; skills.ts parseSkillFrontmatter): name from
 * the front matter else the folder, description else "No description provided.". */
static void test_reference_cases(void)
{
    static const struct {
        const char *folder, *text, *name, *desc;
    } cases[] = {
            {"simple", "---\nname: simple\ndescription: Does A.\n---\nbody\n", "simple", "Does A."},
            {"quoted", "---\nname: \"quoted\"\ndescription: 'Does B: with colon'\n---\n", "quoted",
             "Does B: with colon"},
            {"block", "---\nname: block\ndescription: >\n  Folded text\n  over two lines.\n---\n",
             "block", "Folded text over two lines."},
            {"comment",
             "---\n# a comment\nname: comment\nlicense: MIT\ndescription: Has comment and "
             "license.\n---\n",
             "comment", "Has comment and license."},
            {"crlf", "---\r\nname: crlf\r\ndescription: CRLF file.\r\n---\r\nbody\r\n", "crlf",
             "CRLF file."},
            {"folder-x", "---\nname: other-name\ndescription: Named otherwise.\n---\n",
             "other-name", "Named otherwise."},
            {"hashdesc", "---\nname: hashdesc\ndescription: Uses C# and #tags\n---\n", "hashdesc",
             "Uses C# and #tags"},
            {"nodesc", "---\nname: nodesc\n---\nbody\n", "nodesc", "No description provided."},
            {"nofm", "# Just markdown\n\nNo front matter here.\n", "nofm",
             "No description provided."},
            {"spaced", "---\nname: My Skill\ndescription: Has a spaced name.\n---\n", "My Skill",
             "Has a spaced name."},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        struct sbx_error err = SBX_ERROR_INIT;
        char *name = NULL, *desc = NULL;
        CHECK_OK(sbx__skill_front_matter(cases[i].text, strlen(cases[i].text), cases[i].folder,
                                         &name, &desc, &err),
                 &err);
        CHECK_EQ_STR(name, cases[i].name);
        CHECK_EQ_STR(desc, cases[i].desc);
        free(name);
        free(desc);
    }
}

static void test_front_matter(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *name = NULL, *desc = NULL;

    /* A BOM, CRLF lines, quotes, a folded block, extra keys, blanks after the markers. */
    CHECK_OK(fm("\xEF\xBB\xBF---  \r\nname: \"csv-tool\"\r\nlicense: MIT\r\n"
                "metadata: {version: 2}\r\ndescription: >-\r\n  Reads CSV\r\n\r\n  files.\r\n"
                "---\r\nbody",
                &name, &desc, &err),
             &err);
    CHECK_EQ_STR(name, "csv-tool");
    CHECK_EQ_STR(desc, "Reads CSV files.");
    free(name);
    free(desc);

    /* A quoted value is read as YAML (escapes); whitespace and controls fold to spaces. */
    CHECK_OK(fm("---\nname: a\ndescription: \"  one\\ttwo\\n\\nthree\\u0007 \"\n---\n", &name,
                &desc, &err),
             &err);
    CHECK_EQ_STR(desc, "one two three");
    free(name);
    free(desc);

    /* Plain values are taken as written, as the SDK's line parser does: YAML would end the
     * first at " #" and refuse the others. */
    static const struct {
        const char *text, *name, *desc;
    } asis[] = {
            {"---\nname: a\ndescription: b # not a comment\n---\n", "a", "b # not a comment"},
            {"---\nname: a\ndescription: key: value: more\n---\n", "a", "key: value: more"},
            {"---\nname: [a\ndescription: c\n---\n", "[a", "c"},
            {"---\nname: 12\ndescription: [x]\n---\n", "12", "[x]"},
            {"---\nname: a\nname: b\ndescription: c\n---\n", "b", "c"}, /* the last wins */
            {"---\nname: !!python/object x\ndescription: c\n---\n", "!!python/object x", "c"},
            {"---\nname: ../etc\ndescription: b\n---\n", "../etc", "b"}, /* only shown */
            /* Indented lines belong to another key; a block the YAML cannot read is kept. */
            {"---\nmetadata:\n  name: inner\ndescription: d\n---\n", "folder", "d"},
            {"---\nname: a\ndescription: >\n  x\n bad: [\n---\n", "a", ">"},
            /* Defaults: no closing line, an empty front matter, empty values. */
            {"---\nname: a\ndescription: b\n", "folder", "No description provided."},
            {"---\n---\n", "folder", "No description provided."},
            {"---\n- a\n- b\n---\n", "folder", "No description provided."},
            {"---\nname: \"\"\ndescription:\n---\n", "folder", "No description provided."},
            {"", "folder", "No description provided."},
            {"----\nname: a\n", "folder", "No description provided."},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(asis); i++) {
        name = desc = NULL;
        CHECK_OK(fm(asis[i].text, &name, &desc, &err), &err);
        CHECK_EQ_STR(name, asis[i].name);
        CHECK_EQ_STR(desc, asis[i].desc);
        free(name);
        free(desc);
    }

    /* A 65-byte name, a description past the limit, front matter past its limit. */
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    name = desc = NULL;
    CHECK_OK(sbx_buf_addf(&b, &err, "---\nname: a%064d\ndescription: x\n---\n", 0), &err);
    CHECK_ERR(fm(b.data, &name, &desc, &err), SBX_E_TOOBIG, &err, "is longer than 64 bytes");
    CHECK(!name && !desc);
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_addf(&b, &err, "---\nname: a\ndescription: x%01024d\n---\n", 0), &err);
    CHECK_ERR(fm(b.data, &name, &desc, &err), SBX_E_TOOBIG, &err, "longer than 1024 bytes");
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_addf(&b, &err, "---\nname: a\ndescription: x%01023d\n---\n", 0), &err);
    CHECK_OK(fm(b.data, &name, &desc, &err), &err);
    CHECK_EQ_INT(desc ? strlen(desc) : 0, 1024);
    free(name);
    free(desc);
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_adds(&b, "---\nname: a\ndescription: b\n", &err), &err);
    for (int i = 0; i < 1000; i++)
        CHECK_OK(sbx_buf_addf(&b, &err, "k%d: filler\n", i), &err);
    CHECK_OK(sbx_buf_adds(&b, "---\n", &err), &err);
    CHECK_ERR(fm(b.data, &name, &desc, &err), SBX_E_TOOBIG, &err, "longer than 8192 bytes");
    sbx_buf_release(&b);
}

/* ---- host folders ---------------------------------------------------------------------------- */

static char *at(const char *rel)
{
    return sbx_xasprintf("%s/%s", tmp, rel);
}

static void put(const char *rel, const char *text)
{
    char *p = at(rel);
    FILE *f = fopen(p, "we");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        abort();
    free(p);
}

static void dir(const char *rel)
{
    char *p = at(rel);
    if (mkdir(p, 0755) < 0)
        abort();
    free(p);
}

static void skill(const char *folder, const char *name, const char *desc)
{
    char *md = sbx_xasprintf("%s/SKILL.md", folder);
    char *text = sbx_xasprintf("---\nname: %s\ndescription: %s\n---\nbody\n", name, desc);
    dir(folder);
    put(md, text);
    free(md);
    free(text);
}

static void sparse(const char *rel, off_t size)
{
    char *p = at(rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, size) < 0)
        abort();
    close(fd);
    free(p);
}

static void link_to(const char *target, const char *rel)
{
    char *p = at(rel);
    if (symlink(target, p) < 0)
        abort();
    free(p);
}

static int open_dir(const char *rel)
{
    char *p = at(rel);
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(p);
    return fd;
}

static const struct sbx__skill *by_dir(const struct sbx__skill_list *l, const char *d)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].dir, d) == 0)
            return &l->v[i];
    return NULL;
}

static void test_hostile_folders(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__skill_list l = {0};
    char path[64];

    dir("s");
    skill("s/good", "good", "A good skill.");
    dir("s/good/scripts");
    put("s/good/scripts/run.sh", "echo hi\n");
    skill("s/link-file", "lf", "x");
    link_to("/etc/passwd", "s/link-file/passwd");
    skill("s/link-dir", "ld", "x");
    link_to("/", "s/link-dir/root");
    skill("s/link-inside", "li", "x");
    link_to("SKILL.md", "s/link-inside/again.md"); /* even one that stays inside */
    link_to("good", "s/alias");                    /* the skill folder itself */
    dir("s/md-link");
    link_to("/etc/hostname", "s/md-link/SKILL.md");
    dir("s/md-dir");
    dir("s/md-dir/SKILL.md");
    dir("s/no-md");
    put("s/no-md/README.md", "x");
    dir("s/no-front");
    put("s/no-front/SKILL.md", "# just markdown\n");
    skill("s/fifo", "fifo", "x");
    char *fp = at("s/fifo/pipe");
    CHECK(mkfifo(fp, 0644) == 0);
    free(fp);
    skill("s/huge", "huge", "x");
    sparse("s/huge/big.bin", (off_t)SBX_SKILL_MAX_FILE + 1);
    skill("s/edge", "edge", "exactly at the file limit");
    sparse("s/edge/big.bin", (off_t)SBX_SKILL_MAX_FILE);
    skill("s/heavy", "heavy", "x");
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "s/heavy/part%d", i);
        sparse(path, (off_t)SBX_SKILL_MAX_FILE);
    }
    skill("s/md-huge", "mdhuge", "x");
    sparse("s/md-huge/SKILL.md", SBX_SKILL_MD_MAX + 1);
    skill("s/crowd", "crowd", "x");
    for (int i = 0; i < SBX_SKILL_MAX_ENTRIES; i++) {
        snprintf(path, sizeof(path), "s/crowd/f%d", i);
        put(path, "");
    }
    skill("s/deep", "deep", "x");
    char *p = sbx_xstrdup("s/deep");
    for (int i = 0; i <= SBX_SKILL_MAX_DEPTH + 1; i++) {
        char *q = sbx_xasprintf("%s/d", p);
        free(p);
        p = q;
        dir(p);
    }
    free(p);
    skill("s/bad name", "badname", "x");
    skill("s/copy", "good", "Claims a taken name.");
    skill("s/zz-first", "twice", "first by folder name");
    skill("s/zz-second", "twice", "second");
    skill("s/.hidden", "hidden", "x");
    put("s/README.md", "not a skill\n");

    int fd = open_dir("s");
    CHECK(fd >= 0);
    sbx_buf_reset(&logged);
    CHECK_OK(sbx__skills_scan_host(fd, "./s", &l, &err), &err);
    const char *w = logged.data ? logged.data : "";
    CHECK_EQ_INT(l.n, 4);
    CHECK(by_dir(&l, "good") && strcmp(by_dir(&l, "good")->description, "A good skill.") == 0);
    /* Listed as the SDK lists it: the folder's name, no description. */
    CHECK(by_dir(&l, "no-front") && strcmp(by_dir(&l, "no-front")->name, "no-front") == 0 &&
          strcmp(by_dir(&l, "no-front")->description, "No description provided.") == 0);
    CHECK(by_dir(&l, "edge") != NULL);
    CHECK(by_dir(&l, "zz-first") && !by_dir(&l, "zz-second"));
    CHECK_CONTAINS(w, "skipped 'link-file' in './s': 'link-file/passwd' is a symlink, which is "
                      "never followed");
    CHECK_CONTAINS(w, "skipped 'link-dir' in './s': 'link-dir/root' is a symlink");
    CHECK_CONTAINS(w, "skipped 'link-inside' in './s': 'link-inside/again.md' is a symlink");
    CHECK_CONTAINS(w, "skipped 'alias' in './s': it is a symlink, which is never followed");
    CHECK_CONTAINS(w, "skipped 'md-link' in './s': 'md-link/SKILL.md' is a symlink");
    CHECK_CONTAINS(w, "skipped 'md-dir' in './s': 'md-dir/SKILL.md' is not a regular file");
    CHECK_CONTAINS(w, "skipped 'no-md' in './s': it has no SKILL.md");
    CHECK_CONTAINS(w, "skipped 'fifo' in './s': 'fifo/pipe' is not a regular file or folder");
    CHECK_CONTAINS(w, "skipped 'huge' in './s': 'huge/big.bin' is larger than 4 MiB");
    CHECK_CONTAINS(w, "skipped 'heavy' in './s': its files are larger than 16 MiB in all");
    CHECK_CONTAINS(w, "skipped 'md-huge' in './s': 'md-huge/SKILL.md' is larger than 256 KiB");
    CHECK_CONTAINS(w, "skipped 'crowd' in './s': it holds more than 256 files and folders");
    CHECK_CONTAINS(w, "skipped 'deep' in './s': 'deep/d/d/d/d/d/d/d/d/d' nests deeper than 8");
    CHECK_CONTAINS(w, "skipped 'bad name' in './s': a skill folder name must be");
    CHECK_CONTAINS(w, "skipped 'copy' in './s': the name 'good' belongs to folder 'good'");
    CHECK_CONTAINS(w, "skipped 'zz-second' in './s': the name 'twice' is already taken by "
                      "'zz-first'");
    CHECK(!strstr(w, "hidden") && !strstr(w, "README"));
    sbx__skill_list_release(&l);
    close(fd);

    /* The folder named like the skill wins a duplicate, whatever the order. */
    dir("d");
    skill("d/aaa", "real", "an impostor");
    skill("d/real", "real", "the real one");
    fd = open_dir("d");
    sbx_buf_reset(&logged);
    CHECK_OK(sbx__skills_scan_host(fd, "d", &l, &err), &err);
    CHECK_EQ_INT(l.n, 1);
    CHECK_EQ_STR(l.n ? l.v[0].description : NULL, "the real one");
    CHECK_CONTAINS(logged.data, "skipped 'aaa' in 'd': the name 'real' belongs to folder 'real'");
    sbx__skill_list_release(&l);
    close(fd);

    /* At most SBX_SKILLS_MAX skills per source; an empty source is no error. */
    dir("many");
    for (int i = 0; i <= SBX_SKILLS_MAX; i++) {
        snprintf(path, sizeof(path), "many/s%03d", i);
        char name[16];
        snprintf(name, sizeof(name), "s%03d", i);
        skill(path, name, "x");
    }
    fd = open_dir("many");
    sbx_buf_reset(&logged);
    CHECK_OK(sbx__skills_scan_host(fd, "many", &l, &err), &err);
    CHECK_EQ_INT(l.n, SBX_SKILLS_MAX);
    CHECK_CONTAINS(logged.data, "skipped 's100' in 'many': a source holds at most 100 skills");
    sbx__skill_list_release(&l);
    close(fd);
    dir("empty");
    fd = open_dir("empty");
    CHECK_OK(sbx__skills_scan_host(fd, "empty", &l, &err), &err);
    CHECK_EQ_INT(l.n, 0);
    close(fd);
}

static void test_find(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__skill v[] = {
            {"memo", "jots", "jot"},
            {"memo-pad", "pads", "memo"},
            {"pdf", "pdfs", "pdf-tools"},
    };
    struct sbx__skill_list l = {v, SBX_ARRAY_LEN(v)};
    size_t k = 99;
    CHECK_OK(sbx__skills_find(&l, "pdf", &k, &err), &err);
    CHECK_EQ_INT(k, 2);
    CHECK_OK(sbx__skills_find(&l, "pdf-tools", &k, &err), &err);
    CHECK_EQ_INT(k, 2);
    CHECK_OK(sbx__skills_find(&l, "jot", &k, &err), &err);
    CHECK_EQ_INT(k, 0);
    CHECK_OK(sbx__skills_find(&l, "memo-pad", &k, &err), &err);
    CHECK_EQ_INT(k, 1);
    CHECK_ERR(sbx__skills_find(&l, "memo", &k, &err), SBX_E_INVAL, &err,
              "skill name 'memo' is ambiguous: it names both 'memo' (folder 'jot') and "
              "'memo-pad' (folder 'memo')");
    CHECK_ERR(sbx__skills_find(&l, "PDF", &k, &err), SBX_E_NOTFOUND, &err,
              "no skill named 'PDF' (available: memo, memo-pad, pdf)");
    CHECK_ERR(sbx__skills_find(&l, "", &k, &err), SBX_E_NOTFOUND, &err, "no skill named ''");
    struct sbx__skill_list none = {0};
    CHECK_ERR(sbx__skills_find(&none, "x", &k, &err), SBX_E_NOTFOUND, &err, "(available: none)");
}

static void test_config(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_capability *c = NULL;
    static const char *const good[] = {
            "{\"type\":\"skills\",\"from\":\"./skills\"}",
            "{\"type\":\"skills\",\"from\":\"/does/not/exist/yet\",\"lazy\":true}",
            "{\"type\":\"skills\",\"from\":{\"type\":\"local_dir\",\"src\":\"s\"}}",
            "{\"type\":\"skills\",\"from\":{\"type\":\"git_repo\",\"repo\":\"o/n\",\"ref\":\"v1\","
            "\"subpath\":\"skills\"},\"skills_path\":\"tools/skills\"}",
            "{\"type\":\"skills\",\"from\":{\"type\":\"workspace\",\"path\":\"skills\"}}",
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(good); i++) {
        json_t *v = json_loads(good[i], 0, NULL);
        CHECK_OK(sbx_capability_from_json(v, &c, &err), &err);
        if (c)
            CHECK_EQ_STR(sbx_capability_type(c), "skills");
        sbx_capability_unref(c);
        c = NULL;
        json_decref(v);
    }
    static const struct {
        const char *doc;
        const char *msg;
    } bad[] = {
            {"\"skills\"", "capability 'skills': needs a source"},
            {"{\"type\":\"skills\"}", "missing required field 'from'"},
            {"{\"type\":\"skills\",\"from\":3}", "field 'from': must be a folder or an entry"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"file\"}}",
             "field 'from': unknown type 'file' (known: local_dir, git_repo, workspace)"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"local_dir\"}}",
             "a local_dir source needs a string 'src'"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"local_dir\",\"src\":\"s\",\"mode\":1}}",
             "unknown field 'mode'"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"git_repo\",\"repo\":\"o/n\",\"ref\":\"a..b\"}}",
             "not a valid git ref"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"git_repo\",\"repo\":\"../x\"}}", "repo"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"git_repo\",\"repo\":\"o/n\","
             "\"subpath\":\"../up\"}}",
             "subpath"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"workspace\"}}",
             "missing required field 'path'"},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"workspace\",\"path\":\"../out\"}}", ".."},
            {"{\"type\":\"skills\",\"from\":{\"type\":\"workspace\",\"path\":\"/etc\"}}",
             "must be relative"},
            {"{\"type\":\"skills\",\"from\":\"s\",\"lazy\":\"yes\"}", "field 'lazy'"},
            {"{\"type\":\"skills\",\"from\":\"s\",\"skills_path\":\"../x\"}", "skills_path"},
            {"{\"type\":\"skills\",\"from\":\"s\",\"skills_path\":\"\"}", "skills_path"},
            {"{\"type\":\"skills\",\"from\":\"s\",\"colour\":1}", "unknown field 'colour'"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        json_t *v = json_loads(bad[i].doc, JSON_DECODE_ANY, NULL);
        CHECK(v != NULL);
        CHECK_ERR(sbx_capability_from_json(v, &c, &err), SBX_E_INVAL, &err, bad[i].msg);
        json_decref(v);
    }
}

/* ---- the public listing (skills.h) ----------------------------------------------------------- */

static const struct sbx_skill *public_by_name(const struct sbx_skill_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0)
            return &l->v[i];
    return NULL;
}

static void test_list_dir(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_skill_list l = {0};
    dir("pub");
    skill("pub/alpha", "alpha", "Does   the\n  first thing.");
    skill("pub/beta-folder", "beta", "Does the second.");
    dir("pub/no-md");
    dir("pub/.hidden");
    put("pub/README.md", "not a skill\n");
    sbx_buf_setlen(&logged, 0);
    char *root = at("pub");
    CHECK_OK(sbx_skills_list_dir(root, &l, &err), &err);
    CHECK_EQ_INT(l.n, 2);
    const struct sbx_skill *a = public_by_name(&l, "alpha");
    const struct sbx_skill *b = public_by_name(&l, "beta");
    char *want_a = at("pub/alpha"), *want_b = at("pub/beta-folder");
    CHECK(a && strcmp(a->description, "Does the first thing.") == 0);
    CHECK(a && strcmp(a->path, want_a) == 0);
    CHECK(b && strcmp(b->path, want_b) == 0);
    CHECK_CONTAINS(logged.data, "'no-md'"); /* skipped, and said so */
    sbx_skill_list_release(&l);
    CHECK_EQ_INT(l.n, 0);
    char *gone = at("pub/nothing-here");
    CHECK_ERR(sbx_skills_list_dir(gone, &l, &err), SBX_E_NOTFOUND, &err, "does not exist");
    free(gone);
    free(want_a);
    free(want_b);
    free(root);
}

/* Skills already in a workspace, read through a local session. */
static void test_list_workspace(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_skill_list l = {0};
    char *run = at("run"), *ws = at("ws");
    struct sbx_local_options o = {.runtime_dir = run, .workspace_dir = ws};
    dir("run");
    CHECK_OK(sbx_client_new("local", &o, &c, &err), &err);
    if (c)
        CHECK_OK(sbx_client_create(c, NULL, &s, &err), &err);
    if (!s)
        goto out;
    const char *md = "---\nname: gamma\ndescription: Third.\n---\n";
    CHECK_OK(sbx_session_write(s, "tools/skills/gamma/SKILL.md", md, strlen(md), 0644,
                               SBX_WRITE_PARENTS, &err),
             &err);
    CHECK_OK(sbx_session_mkdir(s, "tools/skills/empty", SBX_MKDIR_PARENTS, &err), &err);
    CHECK_OK(sbx_skills_list_workspace(s, "tools/./skills/", &l, &err), &err);
    CHECK_EQ_INT(l.n, 1);
    if (l.n) {
        CHECK_EQ_STR(l.v[0].name, "gamma");
        CHECK_EQ_STR(l.v[0].description, "Third.");
        CHECK_EQ_STR(l.v[0].path, "tools/skills/gamma");
    }
    sbx_skill_list_release(&l);
    CHECK_ERR(sbx_skills_list_workspace(s, "../x", &l, &err), SBX_E_INVAL, &err, "skills folder");
    CHECK_ERR(sbx_skills_list_workspace(s, "nowhere", &l, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_skills_list_workspace(s, NULL, &l, &err), &err);
    CHECK_EQ_INT(l.n, 0);
    sbx_skill_list_release(&l);
    CHECK_OK(sbx_session_delete(s, &err), &err);
out:
    sbx_session_free(s);
    sbx_client_free(c);
    free(run);
    free(ws);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(tmp))
        abort();
    sbx_buf_init(&logged, SBX_BUF_NOLIMIT);
    sbx_log_set_handler(capture, NULL, SBX_LOG_WARN);
    TAP_RUN(test_reference_cases);
    TAP_RUN(test_front_matter);
    TAP_RUN(test_hostile_folders);
    TAP_RUN(test_find);
    TAP_RUN(test_config);
    TAP_RUN(test_list_dir);
    TAP_RUN(test_list_workspace);
    sbx_log_set_handler(NULL, NULL, SBX_LOG_ERROR);
    sbx_buf_release(&logged);
    rm_tree(tmp);
    return TAP_DONE();
}

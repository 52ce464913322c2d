/* sbx: the workspace tree shown to the agent (sbx_manifest_render_tree).
 *
 * Entries are laid out by path component, not by declaration: a top-level key "a/b" and a dir
 * "a" with child "b" both appear under "a/". Components no entry declares are shown as plain
 * directories, since materialising creates them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sandbox/manifest/internal.h"

struct node {
    char *name;   /* one path component */
    size_t entry; /* entry index or SBX_MANIFEST_NONE */
    size_t *kids;
    size_t nkids, kalloc;
    size_t descendants; /* nodes below this one */
};

struct tree {
    struct node *nodes;
    size_t n, alloc;
    struct sbx__pathmap index; /* path -> node */
};

static size_t add_node(struct tree *t, size_t parent, const char *name, size_t nlen)
{
    SBX_ALLOC_GROW(t->nodes, t->n + 1, t->alloc);
    size_t id = t->n++;
    struct node *nd = &t->nodes[id];
    memset(nd, 0, sizeof(*nd));
    nd->name = sbx_xstrndup(name, nlen);
    nd->entry = SBX_MANIFEST_NONE;
    if (parent != SBX_MANIFEST_NONE) {
        struct node *p = &t->nodes[parent];
        SBX_ALLOC_GROW(p->kids, p->nkids + 1, p->kalloc);
        p->kids[p->nkids++] = id;
    }
    return id;
}

static void build(struct tree *t, const struct sbx_manifest *m)
{
    add_node(t, SBX_MANIFEST_NONE, "", 0);
    size_t count = sbx_manifest_entry_count(m);
    for (size_t i = 0; i < count; i++) {
        const char *p = sbx_manifest_entry_at(m, i)->path;
        size_t plen = strlen(p);
        size_t parent = 0;
        size_t start = 0;
        for (size_t k = 0; k <= plen; k++) {
            if (k < plen && p[k] != '/')
                continue;
            size_t id = sbx__pathmap_get(&t->index, p, k);
            if (id == SBX_MANIFEST_NONE) {
                id = add_node(t, parent, p + start, k - start);
                sbx__pathmap_put(&t->index, p, k, id);
            }
            parent = id;
            start = k + 1;
        }
        t->nodes[parent].entry = i;
    }
}

/* Nodes are created parents first, so a reverse pass sums subtrees. */
static void count_descendants(struct tree *t)
{
    for (size_t i = t->n; i-- > 0;) {
        struct node *nd = &t->nodes[i];
        for (size_t k = 0; k < nd->nkids; k++)
            nd->descendants += 1 + t->nodes[nd->kids[k]].descendants;
    }
}

static void tree_release(struct tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->nodes[i].name);
        free(t->nodes[i].kids);
    }
    free(t->nodes);
    sbx__pathmap_release(&t->index);
}

static void human_size(size_t n, char *out, size_t outsz)
{
    if (n < 1024)
        snprintf(out, outsz, "%zu byte%s", n, n == 1 ? "" : "s");
    else if (n < (size_t)1 << 20)
        snprintf(out, outsz, "%.1f KiB", (double)n / 1024);
    else
        snprintf(out, outsz, "%.1f MiB", (double)n / (1024.0 * 1024.0));
}

static const char *mount_label(enum sbx_entry_type t)
{
    switch (t) {
    case SBX_ENTRY_S3_MOUNT:
        return "S3";
    case SBX_ENTRY_GCS_MOUNT:
        return "GCS";
    case SBX_ENTRY_R2_MOUNT:
        return "R2";
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
        return "Azure Blob";
    case SBX_ENTRY_BOX_MOUNT:
        return "Box";
    case SBX_ENTRY_S3_FILES_MOUNT:
        return "S3 Files";
    case SBX_ENTRY_FILE:
    case SBX_ENTRY_DIR:
    case SBX_ENTRY_LOCAL_FILE:
    case SBX_ENTRY_LOCAL_DIR:
    case SBX_ENTRY_GIT_REPO:
        break;
    }
    return "";
}

/* What the line of entry e says of it, into info (empty for a plain directory). */
static void entry_info(const struct sbx_manifest_entry *e, char *info, size_t n)
{
    enum sbx_entry_type t = e->type;
    if (sbx_entry_type_is_mount(t)) {
        snprintf(info, n, "%s mount, %s%s%.200s", mount_label(t),
                 e->read_only ? "read-only" : "read-write", e->mount_path ? ", mounted at " : "",
                 e->mount_path ? e->mount_path : "");
    } else if (t == SBX_ENTRY_FILE) {
        human_size(e->content_len, info, n);
    } else if (t == SBX_ENTRY_LOCAL_FILE || (t == SBX_ENTRY_LOCAL_DIR && e->src)) {
        snprintf(info, n, "copied from the host");
    } else if (t == SBX_ENTRY_GIT_REPO) {
        /* Local repositories would show a host path; name only remote ones. */
        if (e->host || strncmp(e->repo, "https://", 8) == 0)
            snprintf(info, n, "git repository %.100s%s%.60s", e->repo, e->ref ? " at " : "",
                     e->ref ? e->ref : "");
        else
            snprintf(info, n, "git repository");
    }
}

/* Append one line: name, kind, folded children, description (on one line). */
static int render_line(struct sbx_buf *b, const struct node *nd, const struct sbx_manifest *m,
                       int folded, struct sbx_error *err)
{
    const struct sbx_manifest_entry *e =
            nd->entry == SBX_MANIFEST_NONE ? NULL : sbx_manifest_entry_at(m, nd->entry);
    int is_dir = !e || (e->type != SBX_ENTRY_FILE && e->type != SBX_ENTRY_LOCAL_FILE);
    int rc = sbx_buf_adds(b, nd->name, err);
    if (rc == 0 && is_dir)
        rc = sbx_buf_addch(b, '/', err);
    char info[256] = "";
    if (e)
        entry_info(e, info, sizeof(info));
    if (rc == 0 && folded) {
        size_t l = strlen(info);
        snprintf(info + l, sizeof(info) - l, "%s%zu entr%s not shown", l ? ", " : "",
                 nd->descendants, nd->descendants == 1 ? "y" : "ies");
    }
    if (rc == 0 && info[0])
        rc = sbx_buf_addf(b, err, "  (%s)", info);
    if (rc == 0 && e && e->description) {
        rc = sbx_buf_adds(b, "  # ", err);
        for (const char *c = e->description; rc == 0 && *c; c++)
            rc = sbx_buf_addch(b, ((unsigned char)*c < 0x20 || *c == 0x7f) ? ' ' : *c, err);
    }
    if (rc == 0)
        rc = sbx_buf_addch(b, '\n', err);
    return rc;
}

/* Depth-first over the tree; prefix holds the "│   " / "    " columns of the ancestors. */
static int render(struct sbx_buf *b, const struct tree *t, size_t id, int level, int depth,
                  struct sbx_buf *prefix, const struct sbx_manifest *m, struct sbx_error *err)
{
    const struct node *nd = &t->nodes[id];
    for (size_t k = 0; k < nd->nkids; k++) {
        const struct node *kid = &t->nodes[nd->kids[k]];
        int last = k + 1 == nd->nkids;
        int folded = depth > 0 && level + 1 >= depth && kid->nkids > 0;
        int rc = sbx_buf_add(b, prefix->data, prefix->len, err);
        if (rc == 0)
            rc = sbx_buf_adds(b, last ? "└── " : "├── ", err);
        if (rc == 0)
            rc = render_line(b, kid, m, folded, err);
        if (rc)
            return rc;
        if (folded || kid->nkids == 0)
            continue;
        size_t keep = prefix->len;
        if ((rc = sbx_buf_adds(prefix, last ? "    " : "│   ", err)))
            return rc;
        rc = render(b, t, nd->kids[k], level + 1, depth, prefix, m, err);
        prefix->len = keep;
        prefix->data[keep] = '\0';
        if (rc)
            return rc;
    }
    return 0;
}

int sbx_manifest_render_tree(const struct sbx_manifest *m, int depth, size_t max_bytes,
                             struct sbx_buf *out, struct sbx_error *err)
{
    struct tree t = {0};
    struct sbx_buf text, prefix;
    if (max_bytes == 0)
        max_bytes = SBX_MANIFEST_TREE_DEFAULT_MAX_BYTES;
    if (depth < 0)
        depth = 0;
    sbx_buf_init(&text, SBX_BUF_NOLIMIT);
    sbx_buf_init(&prefix, SBX_BUF_NOLIMIT);
    build(&t, m);
    count_descendants(&t);
    int rc = sbx_buf_addf(&text, err, "%s\n", sbx_manifest_root(m));
    if (rc == 0)
        rc = render(&text, &t, 0, 0, depth, &prefix, m, err);
    if (rc)
        goto out;
    if (text.len <= max_bytes) {
        rc = sbx_buf_add(out, text.data, text.len, err);
        goto out;
    }
    /* Keep whole lines and leave room for the marker, so the result never exceeds max_bytes. */
    size_t total_lines = 0;
    for (size_t i = 0; i < text.len; i++)
        total_lines += text.data[i] == '\n';
    char marker[128];
    size_t cut = max_bytes > sizeof(marker) ? max_bytes - sizeof(marker) : 0;
    while (cut > 0 && text.data[cut - 1] != '\n')
        cut--;
    size_t kept_lines = 0;
    for (size_t i = 0; i < cut; i++)
        kept_lines += text.data[i] == '\n';
    int ml = snprintf(marker, sizeof(marker),
                      "... (truncated, %zu more lines; use ls to see them)\n",
                      total_lines - kept_lines);
    rc = sbx_buf_add(out, text.data, cut, err);
    if (rc == 0 && ml > 0 && cut + (size_t)ml <= max_bytes)
        rc = sbx_buf_add(out, marker, (size_t)ml, err);
out:
    sbx_buf_release(&text);
    sbx_buf_release(&prefix);
    tree_release(&t);
    return rc;
}

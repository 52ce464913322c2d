/* sbx internal: the pieces of the skills capability that unit tests reach directly (front
 * matter, scanning a host skills folder, matching a name). */
#ifndef SBX_CAPABILITY_SKILLS_INTERNAL_H
#define SBX_CAPABILITY_SKILLS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/error.h"
#include "sbx/session.h"

/* Limits. A skill that passes one is skipped with a warning, never cut. */
#define SBX_SKILLS_MAX        100                  /* skills per source */
#define SBX_SKILLS_SCAN_MAX   1000                 /* entries looked at in a source folder */
#define SBX_SKILL_NAME_MAX    64                   /* name and folder name */
#define SBX_SKILL_DESC_MAX    1024                 /* description, after whitespace is folded */
#define SBX_SKILL_MD_MAX      (256u << 10)         /* SKILL.md */
#define SBX_SKILL_FRONT_MAX   (8u << 10)           /* its front matter */
#define SBX_SKILL_MAX_ENTRIES 256                  /* files and folders in one skill */
#define SBX_SKILL_MAX_FILE    ((uint64_t)4 << 20)  /* one file */
#define SBX_SKILL_MAX_BYTES   ((uint64_t)16 << 20) /* all files of one skill */
#define SBX_SKILL_MAX_DEPTH   8                    /* folder nesting inside a skill */

struct sbx__skill {
    char *name;        /* from the front matter */
    char *description; /* from the front matter, whitespace folded to single spaces */
    char *dir;         /* the skill's folder name in its source */
};

struct sbx__skill_list {
    struct sbx__skill *v; /* sorted by folder name */
    size_t n;
};

void sbx__skill_list_release(struct sbx__skill_list *l);

/* What the SDK lists for a skill whose SKILL.md gives no description. */
#define SBX_SKILL_NO_DESCRIPTION "No description provided."

/* Name and description of the skill in folder dir from its SKILL.md, as the reference SDK
 * lists them: front matter is a first line "---" up to the next "---" line (at most
 * SBX_SKILL_FRONT_MAX bytes, else SBX_E_TOOBIG); each top-level "key: value" line gives a
 * field (comment lines and lines without ':' are passed over, the last of a key wins), a plain
 * one-line value as it is written (a '#' inside it stays), a quoted, block ('|', '>') or
 * multi-line (continued on indented lines) value as YAML reads it. Without front matter, 'name' or
 * 'description' (or with an empty one) the name is dir and the description
 * SBX_SKILL_NO_DESCRIPTION. Whitespace and control characters fold to single spaces. A name over
 * SBX_SKILL_NAME_MAX or a description over SBX_SKILL_DESC_MAX bytes is SBX_E_TOOBIG. *name, *desc:
 * caller frees. */
int sbx__skill_front_matter(const char *text, size_t len, const char *dir, char **name, char **desc,
                            struct sbx_error *err);

/* The skills of the host folder open at dfd (shown: how to name it in messages): each
 * subfolder whose name is valid and that holds a valid SKILL.md, and nothing a skill may not
 * hold: symlinks (never followed), other non-regular files, more than SBX_SKILL_MAX_ENTRIES
 * entries, files over SBX_SKILL_MAX_FILE, more than SBX_SKILL_MAX_BYTES in all, folders deeper
 * than SBX_SKILL_MAX_DEPTH. Folders starting with '.' and plain files are passed over; every
 * other folder that is not a usable skill, a duplicate name, and the skills past SBX_SKILLS_MAX
 * are skipped with a warning (sbx_log) naming the skill and the reason. *out: release with
 * sbx__skill_list_release. Errors only for a folder that cannot be read at all. */
int sbx__skills_scan_host(int dfd, const char *shown, struct sbx__skill_list *out,
                          struct sbx_error *err);

/* Copy the skill folder dir of the host folder open at dfd to dest in the workspace, under the
 * same rules as the scan (checked again while copying: the host folder may have changed). On
 * failure dest is removed again. */
int sbx__skill_copy(struct sbx_session *s, int dfd, const char *dir, const char *dest,
                    struct sbx_error *err);

/* The skill whose name or folder name is q: *idx. SBX_E_NOTFOUND naming the known skills,
 * SBX_E_INVAL when two skills match. */
int sbx__skills_find(const struct sbx__skill_list *l, const char *q, size_t *idx,
                     struct sbx_error *err);

#endif

/* sbx: skills, as the "skills" capability (capability.h) finds them.
 *
 * A skill is a folder holding a SKILL.md whose front matter (between "---" lines at its top)
 * names it and says what it is for:
 *
 *   ---
 *   name: pdf-report
 *   description: Turns the workspace's findings into a PDF report.
 *   ---
 *
 * Front matter is read as the Agents SDK reads it: a plain one-line value as written (a '#'
 * inside stays), a quoted or block value as YAML. Without front matter, a name or a
 * description, the skill is still listed: its name is its folder's, its description "No
 * description provided.". The folder name is 1 to 64 of [A-Za-z0-9._-], not starting with '.'
 * or '-'; the name at most 64 bytes and the description at most 1024 once whitespace runs are
 * folded to one space. A folder that breaks a rule (no SKILL.md, a symlink anywhere in it,
 * more than 256 entries or 16 MiB, a file over 4 MiB, nesting deeper than 8) is not a skill: it
 * is skipped with a warning through the log handler (log.h), naming it and the rule; so is
 * every skill past the hundredth and, of two skills with one name, the one not in the folder
 * of that name (else the second). Folders starting with '.' and plain files are passed over
 * quietly.
 * docs/internals/capabilities.md, "skills", has the rules in full. */
#ifndef SBX_SKILLS_H
#define SBX_SKILLS_H

#include <stddef.h>

#include "common.h"
#include "error.h"
#include "session.h"

struct sbx_skill {
    char *name;        /* from the front matter, else the folder's name */
    char *description; /* from the front matter (whitespace folded), else the default */
    char *path;        /* the skill's folder: the listed folder joined with its folder name */
};

/* Skills sorted by folder name. Owned: release with sbx_skill_list_release. */
struct sbx_skill_list {
    struct sbx_skill *v;
    size_t n;
};

/* The skills of the host folder dir (each subfolder that is one). Symlinks inside are never
 * followed. Errors only for a folder that cannot be opened or read at all (SBX_E_NOTFOUND when
 * it does not exist). Blocks on the file system. */
SBX_API int sbx_skills_list_dir(const char *dir, struct sbx_skill_list *out, struct sbx_error *err);

/* The skills of workspace folder path of s ("" or NULL: the workspace root), read through the
 * session (so never outside the workspace): the same rules for SKILL.md; a skill folder or a
 * SKILL.md that is a symlink is skipped with a warning. The contents of a skill are not
 * walked. path in every skill is workspace-relative. Errors: the session's (SBX_E_NOTFOUND for
 * a folder that is not there, SBX_E_SANDBOX when the sandbox is gone). Blocks. */
SBX_API int sbx_skills_list_workspace(struct sbx_session *s, const char *path,
                                      struct sbx_skill_list *out, struct sbx_error *err);

SBX_API void sbx_skill_list_release(struct sbx_skill_list *l);

#endif

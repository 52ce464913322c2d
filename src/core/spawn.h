/* sbx: running a host program (private to the source tree; every layer may use it).
 *
 * One description of a child — program, argv, environment, cwd, what its fds 0-2 are, which
 * other fds it keeps, whether it dies with its parent — and one way to start it: posix_spawn
 * (glibc's is clone(CLONE_VM | CLONE_VFORK): nothing runs in the child but the file actions,
 * and an exec failure comes back as the error of the call). A child with a parent-death signal
 * is the one exception, since posix_spawn has no attribute for it: fork, then the same steps
 * by hand (async-signal-safe calls only), the exec failure coming back the same way; it costs
 * what fork costs the caller. The child gets exactly the environment given (none by default,
 * never the caller's unless asked), an empty signal mask, default dispositions, and no fd of
 * the caller's but the ones named here: everything above them is closed whether or not it was
 * close-on-exec. A bare program name is looked up in a search path given here, never in $PATH.
 *
 * Blocking: start does not wait for the program to run beyond its exec; wait and run block up
 * to their timeout. Not async-signal-safe; thread-safe (no shared state). */
#ifndef SBX_CORE_SPAWN_H
#define SBX_CORE_SPAWN_H

/* 1 in a build with a sanitizer whose runtime tracks each thread's stack (ASan, TSan): such a
 * runtime mistakes a child that shares the caller's memory and runs on a stack of its own
 * (clone with CLONE_VM) for a corrupted thread, so code that starts one (the local provider's
 * exec reaper, the disk release) forks instead there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#    define SBX__SANITIZED 1
#elif defined(__has_feature)
#    if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#        define SBX__SANITIZED 1
#    endif
#endif
#ifndef SBX__SANITIZED
#    define SBX__SANITIZED 0
#endif

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* The directories a bare program name is looked up in when no search path is given. */
#define SBX__SPAWN_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
/* Other fds a child may keep. */
#define SBX__SPAWN_KEEP_MAX 4

enum sbx__spawn_io {
    SBX__SPAWN_NULL = 0, /* /dev/null (the default) */
    SBX__SPAWN_INHERIT,  /* the caller's fd of the same number */
    SBX__SPAWN_FD,       /* .fd (borrowed; the caller keeps it) */
    SBX__SPAWN_PIPE,     /* a pipe to the caller: struct sbx__child's in/out/err */
};

struct sbx__spawn_stdio {
    enum sbx__spawn_io how;
    int fd; /* SBX__SPAWN_FD only */
};

struct sbx__spawn_keep {
    int fd; /* the caller's (borrowed) */
    int at; /* its number in the child, >= 3 */
};

/* All pointers borrowed for the duration of the start call. */
struct sbx__spawn {
    const char *program;     /* an absolute path, or a bare name looked up in search_path */
    const char *search_path; /* ':'-separated absolute dirs; NULL: SBX__SPAWN_PATH */
    const char *const *argv; /* NULL: just the program */
    const char *const *env;  /* NULL-terminated "K=V"; NULL: an empty environment */
    int inherit_env;         /* 1: the caller's environ instead of env (say why when used) */
    const char *cwd;         /* NULL: the caller's */
    struct sbx__spawn_stdio in, out, err;
    struct sbx__spawn_keep keep[SBX__SPAWN_KEEP_MAX];
    size_t nkeep;
    int new_session; /* setsid(): its own session and process group, no controlling tty */
    int new_group;   /* setpgid(0, 0): its own process group */
    /* A signal (SIGTERM, SIGKILL) the child gets when the thread that started it ends
     * (PR_SET_PDEATHSIG; a thread, not the process: start such children from a thread that
     * lives as long as they should). A child whose parent is gone before it could arrange this
     * exits at once, status 127. 0: none, the child outlives its parent. */
    int parent_death_signal;
    const char *name; /* in messages; NULL: program */
};

struct sbx__child {
    pid_t pid;        /* -1 once reaped */
    int in, out, err; /* the caller's ends of SBX__SPAWN_PIPE streams (owned), else -1 */
    int own_group;    /* it leads a process group of its own: a timeout kills the group */
    char name[64];    /* for messages */
};

/* Start sp. On success *c is filled (release with sbx__child_wait or sbx__child_kill). Errors
 * name the program: SBX_E_NOTFOUND "cannot run 'git': not found in '/usr/bin:/bin'",
 * SBX_E_INVAL for a relative path or a keep at < 3, else the errno of the exec ("cannot run
 * 'x': permission denied"). Nothing is left running on failure. */
int sbx__spawn_start(const struct sbx__spawn *sp, struct sbx__child *c, struct sbx_error *err);

/* Close the caller's pipe ends, wait for the child (timeout_ms < 0: forever), and reap it;
 * *status (may be NULL) receives the wait status. On timeout the child's process group (its
 * own when it leads one, else just the child) gets SIGKILL, the child is reaped, and the
 * result is SBX_E_TIMEOUT "'x' did not finish within N ms". */
int sbx__child_wait(struct sbx__child *c, int64_t timeout_ms, int *status, struct sbx_error *err);

/* SIGKILL the child (its group when it leads one), reap it, close the pipe ends. Cannot fail;
 * a child already reaped is left alone. */
void sbx__child_kill(struct sbx__child *c);

/* What the run of a child left: its wait status and its output. */
struct sbx__spawn_capture {
    struct sbx_buf *out, *err; /* borrowed, may be NULL (read and dropped); bounded by their max */
    int out_cut, err_cut;      /* set: output past the bound was read and dropped */
    int status;                /* the wait status */
};

/* Start sp, read its SBX__SPAWN_PIPE stdout/stderr into cap (bounded: the rest is drained so
 * the child never blocks on us), and wait as sbx__child_wait does, timeout_ms counting over
 * the whole run. stdin may not be a pipe here (SBX_E_INVAL): nothing would feed it. A program
 * that runs and fails is not an error: look at cap->status. */
int sbx__spawn_run(const struct sbx__spawn *sp, int64_t timeout_ms, struct sbx__spawn_capture *cap,
                   struct sbx_error *err);

/* "status 3", "signal 9" for a wait status, into buf (always NUL-terminated). */
void sbx__spawn_describe(int status, char *buf, size_t n);

#endif

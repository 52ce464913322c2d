/* Private: sqlite, opened on first use (src/core/dl.h). Include this instead of
 * <sqlite3.h>; call sbx__sqlite_load() before the first call. */
#ifndef SBX_CORE_DL_SQLITE_H
#define SBX_CORE_DL_SQLITE_H

#include <sqlite3.h>

#include "core/dl.h"

#define SBX__SQLITE_FUNCS(X)         \
    X(sqlite3_bind_int64)            \
    X(sqlite3_bind_text)             \
    X(sqlite3_busy_timeout)          \
    X(sqlite3_changes)               \
    X(sqlite3_close_v2)              \
    X(sqlite3_column_bytes)          \
    X(sqlite3_column_int)            \
    X(sqlite3_column_int64)          \
    X(sqlite3_column_text)           \
    X(sqlite3_errmsg)                \
    X(sqlite3_errstr)                \
    X(sqlite3_exec)                  \
    X(sqlite3_extended_result_codes) \
    X(sqlite3_finalize)              \
    X(sqlite3_get_autocommit)        \
    X(sqlite3_open_v2)               \
    X(sqlite3_prepare_v2)            \
    X(sqlite3_reset)                 \
    X(sqlite3_step)

struct sbx__sqlite_fns {
    SBX__SQLITE_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__sqlite_fns sbx__sqlite;

/* Load libsqlite3.so.0 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__sqlite_load(struct sbx_error *err);

#define sqlite3_bind_int64            (sbx__sqlite.sqlite3_bind_int64)
#define sqlite3_bind_text             (sbx__sqlite.sqlite3_bind_text)
#define sqlite3_busy_timeout          (sbx__sqlite.sqlite3_busy_timeout)
#define sqlite3_changes               (sbx__sqlite.sqlite3_changes)
#define sqlite3_close_v2              (sbx__sqlite.sqlite3_close_v2)
#define sqlite3_column_bytes          (sbx__sqlite.sqlite3_column_bytes)
#define sqlite3_column_int            (sbx__sqlite.sqlite3_column_int)
#define sqlite3_column_int64          (sbx__sqlite.sqlite3_column_int64)
#define sqlite3_column_text           (sbx__sqlite.sqlite3_column_text)
#define sqlite3_errmsg                (sbx__sqlite.sqlite3_errmsg)
#define sqlite3_errstr                (sbx__sqlite.sqlite3_errstr)
#define sqlite3_exec                  (sbx__sqlite.sqlite3_exec)
#define sqlite3_extended_result_codes (sbx__sqlite.sqlite3_extended_result_codes)
#define sqlite3_finalize              (sbx__sqlite.sqlite3_finalize)
#define sqlite3_get_autocommit        (sbx__sqlite.sqlite3_get_autocommit)
#define sqlite3_open_v2               (sbx__sqlite.sqlite3_open_v2)
#define sqlite3_prepare_v2            (sbx__sqlite.sqlite3_prepare_v2)
#define sqlite3_reset                 (sbx__sqlite.sqlite3_reset)
#define sqlite3_step                  (sbx__sqlite.sqlite3_step)

#endif

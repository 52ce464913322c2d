/* Private: libarchive, opened on first use (src/core/dl.h). Include this instead of
 * <archive.h> and <archive_entry.h>; call sbx__archive_load() before the first call. */
#ifndef SBX_CORE_DL_ARCHIVE_H
#define SBX_CORE_DL_ARCHIVE_H

#include <archive.h>
#include <archive_entry.h>

#include "core/dl.h"

#define SBX__ARCHIVE_FUNCS(X)                 \
    X(archive_entry_clear)                    \
    X(archive_entry_filetype)                 \
    X(archive_entry_free)                     \
    X(archive_entry_hardlink)                 \
    X(archive_entry_new)                      \
    X(archive_entry_pathname)                 \
    X(archive_entry_pathname_utf8)            \
    X(archive_entry_perm)                     \
    X(archive_entry_set_filetype)             \
    X(archive_entry_set_gid)                  \
    X(archive_entry_set_gname)                \
    X(archive_entry_set_mtime)                \
    X(archive_entry_set_pathname)             \
    X(archive_entry_set_pathname_utf8)        \
    X(archive_entry_set_perm)                 \
    X(archive_entry_set_size)                 \
    X(archive_entry_set_symlink_utf8)         \
    X(archive_entry_set_uid)                  \
    X(archive_entry_set_uname)                \
    X(archive_entry_size)                     \
    X(archive_entry_size_is_set)              \
    X(archive_entry_sparse_add_entry)         \
    X(archive_entry_sparse_clear)             \
    X(archive_entry_sparse_count)             \
    X(archive_entry_symlink)                  \
    X(archive_entry_symlink_utf8)             \
    X(archive_errno)                          \
    X(archive_error_string)                   \
    X(archive_filter_bytes)                   \
    X(archive_read_data)                      \
    X(archive_read_data_block)                \
    X(archive_read_data_into_fd)              \
    X(archive_read_disk_descend)              \
    X(archive_read_disk_new)                  \
    X(archive_read_disk_open)                 \
    X(archive_read_disk_set_behavior)         \
    X(archive_read_disk_set_symlink_physical) \
    X(archive_read_free)                      \
    X(archive_read_new)                       \
    X(archive_read_next_header)               \
    X(archive_read_next_header2)              \
    X(archive_read_open_fd)                   \
    X(archive_read_support_filter_bzip2)      \
    X(archive_read_support_filter_gzip)       \
    X(archive_read_support_filter_none)       \
    X(archive_read_support_filter_xz)         \
    X(archive_read_support_filter_zstd)       \
    X(archive_read_support_format_tar)        \
    X(archive_write_add_filter_gzip)          \
    X(archive_write_add_filter_zstd)          \
    X(archive_write_close)                    \
    X(archive_write_data)                     \
    X(archive_write_data_block)               \
    X(archive_write_disk_new)                 \
    X(archive_write_disk_set_options)         \
    X(archive_write_finish_entry)             \
    X(archive_write_free)                     \
    X(archive_write_header)                   \
    X(archive_write_new)                      \
    X(archive_write_open_fd)                  \
    X(archive_write_set_bytes_in_last_block)  \
    X(archive_write_set_format_pax_restricted)

struct sbx__archive_fns {
    SBX__ARCHIVE_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__archive_fns sbx__archive;

/* Load libarchive.so.13 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__archive_load(struct sbx_error *err);

#define archive_entry_clear                    (sbx__archive.archive_entry_clear)
#define archive_entry_filetype                 (sbx__archive.archive_entry_filetype)
#define archive_entry_free                     (sbx__archive.archive_entry_free)
#define archive_entry_hardlink                 (sbx__archive.archive_entry_hardlink)
#define archive_entry_new                      (sbx__archive.archive_entry_new)
#define archive_entry_pathname                 (sbx__archive.archive_entry_pathname)
#define archive_entry_pathname_utf8            (sbx__archive.archive_entry_pathname_utf8)
#define archive_entry_perm                     (sbx__archive.archive_entry_perm)
#define archive_entry_set_filetype             (sbx__archive.archive_entry_set_filetype)
#define archive_entry_set_gid                  (sbx__archive.archive_entry_set_gid)
#define archive_entry_set_gname                (sbx__archive.archive_entry_set_gname)
#define archive_entry_set_mtime                (sbx__archive.archive_entry_set_mtime)
#define archive_entry_set_pathname             (sbx__archive.archive_entry_set_pathname)
#define archive_entry_set_pathname_utf8        (sbx__archive.archive_entry_set_pathname_utf8)
#define archive_entry_set_perm                 (sbx__archive.archive_entry_set_perm)
#define archive_entry_set_size                 (sbx__archive.archive_entry_set_size)
#define archive_entry_set_symlink_utf8         (sbx__archive.archive_entry_set_symlink_utf8)
#define archive_entry_set_uid                  (sbx__archive.archive_entry_set_uid)
#define archive_entry_set_uname                (sbx__archive.archive_entry_set_uname)
#define archive_entry_size                     (sbx__archive.archive_entry_size)
#define archive_entry_size_is_set              (sbx__archive.archive_entry_size_is_set)
#define archive_entry_sparse_add_entry         (sbx__archive.archive_entry_sparse_add_entry)
#define archive_entry_sparse_clear             (sbx__archive.archive_entry_sparse_clear)
#define archive_entry_sparse_count             (sbx__archive.archive_entry_sparse_count)
#define archive_entry_symlink                  (sbx__archive.archive_entry_symlink)
#define archive_entry_symlink_utf8             (sbx__archive.archive_entry_symlink_utf8)
#define archive_errno                          (sbx__archive.archive_errno)
#define archive_error_string                   (sbx__archive.archive_error_string)
#define archive_filter_bytes                   (sbx__archive.archive_filter_bytes)
#define archive_read_data                      (sbx__archive.archive_read_data)
#define archive_read_data_block                (sbx__archive.archive_read_data_block)
#define archive_read_data_into_fd              (sbx__archive.archive_read_data_into_fd)
#define archive_read_disk_descend              (sbx__archive.archive_read_disk_descend)
#define archive_read_disk_new                  (sbx__archive.archive_read_disk_new)
#define archive_read_disk_open                 (sbx__archive.archive_read_disk_open)
#define archive_read_disk_set_behavior         (sbx__archive.archive_read_disk_set_behavior)
#define archive_read_disk_set_symlink_physical (sbx__archive.archive_read_disk_set_symlink_physical)
#define archive_read_free                      (sbx__archive.archive_read_free)
#define archive_read_new                       (sbx__archive.archive_read_new)
#define archive_read_next_header               (sbx__archive.archive_read_next_header)
#define archive_read_next_header2              (sbx__archive.archive_read_next_header2)
#define archive_read_open_fd                   (sbx__archive.archive_read_open_fd)
#define archive_read_support_filter_bzip2      (sbx__archive.archive_read_support_filter_bzip2)
#define archive_read_support_filter_gzip       (sbx__archive.archive_read_support_filter_gzip)
#define archive_read_support_filter_none       (sbx__archive.archive_read_support_filter_none)
#define archive_read_support_filter_xz         (sbx__archive.archive_read_support_filter_xz)
#define archive_read_support_filter_zstd       (sbx__archive.archive_read_support_filter_zstd)
#define archive_read_support_format_tar        (sbx__archive.archive_read_support_format_tar)
#define archive_write_add_filter_gzip          (sbx__archive.archive_write_add_filter_gzip)
#define archive_write_add_filter_zstd          (sbx__archive.archive_write_add_filter_zstd)
#define archive_write_close                    (sbx__archive.archive_write_close)
#define archive_write_data                     (sbx__archive.archive_write_data)
#define archive_write_data_block               (sbx__archive.archive_write_data_block)
#define archive_write_disk_new                 (sbx__archive.archive_write_disk_new)
#define archive_write_disk_set_options         (sbx__archive.archive_write_disk_set_options)
#define archive_write_finish_entry             (sbx__archive.archive_write_finish_entry)
#define archive_write_free                     (sbx__archive.archive_write_free)
#define archive_write_header                   (sbx__archive.archive_write_header)
#define archive_write_new                      (sbx__archive.archive_write_new)
#define archive_write_open_fd                  (sbx__archive.archive_write_open_fd)
#define archive_write_set_bytes_in_last_block  (sbx__archive.archive_write_set_bytes_in_last_block)
#define archive_write_set_format_pax_restricted \
    (sbx__archive.archive_write_set_format_pax_restricted)

#endif

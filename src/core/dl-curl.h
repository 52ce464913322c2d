/* Private: libcurl, opened on first use (src/core/dl.h). Include this instead of
 * <curl/curl.h>; call sbx__curl_load() before the first call. */
#ifndef SBX_CORE_DL_CURL_H
#define SBX_CORE_DL_CURL_H

#include <curl/curl.h>

#include "core/dl.h"

#define SBX__CURL_FUNCS(X)      \
    X(curl_easy_cleanup)        \
    X(curl_easy_getinfo)        \
    X(curl_easy_init)           \
    X(curl_easy_pause)          \
    X(curl_easy_perform)        \
    X(curl_easy_recv)           \
    X(curl_easy_reset)          \
    X(curl_easy_send)           \
    X(curl_easy_setopt)         \
    X(curl_easy_strerror)       \
    X(curl_global_init)         \
    X(curl_multi_add_handle)    \
    X(curl_multi_assign)        \
    X(curl_multi_cleanup)       \
    X(curl_multi_info_read)     \
    X(curl_multi_init)          \
    X(curl_multi_remove_handle) \
    X(curl_multi_setopt)        \
    X(curl_multi_socket_action) \
    X(curl_share_cleanup)       \
    X(curl_share_init)          \
    X(curl_share_setopt)        \
    X(curl_slist_append)        \
    X(curl_slist_free_all)

struct sbx__curl_fns {
    SBX__CURL_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__curl_fns sbx__curl;

/* Load libcurl.so.4 once per process and run curl_global_init; SBX_E_UNSUPPORTED naming it when it
 * is missing. Thread-safe. */
int sbx__curl_load(struct sbx_error *err);

/* libcurl's own type-checking wrappers are macros of these names: the table replaces them. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_share_setopt
#undef curl_multi_setopt
#define curl_easy_cleanup        (sbx__curl.curl_easy_cleanup)
#define curl_easy_getinfo        (sbx__curl.curl_easy_getinfo)
#define curl_easy_init           (sbx__curl.curl_easy_init)
#define curl_easy_pause          (sbx__curl.curl_easy_pause)
#define curl_easy_perform        (sbx__curl.curl_easy_perform)
#define curl_easy_recv           (sbx__curl.curl_easy_recv)
#define curl_easy_reset          (sbx__curl.curl_easy_reset)
#define curl_easy_send           (sbx__curl.curl_easy_send)
#define curl_easy_setopt         (sbx__curl.curl_easy_setopt)
#define curl_easy_strerror       (sbx__curl.curl_easy_strerror)
#define curl_global_init         (sbx__curl.curl_global_init)
#define curl_multi_add_handle    (sbx__curl.curl_multi_add_handle)
#define curl_multi_assign        (sbx__curl.curl_multi_assign)
#define curl_multi_cleanup       (sbx__curl.curl_multi_cleanup)
#define curl_multi_info_read     (sbx__curl.curl_multi_info_read)
#define curl_multi_init          (sbx__curl.curl_multi_init)
#define curl_multi_remove_handle (sbx__curl.curl_multi_remove_handle)
#define curl_multi_setopt        (sbx__curl.curl_multi_setopt)
#define curl_multi_socket_action (sbx__curl.curl_multi_socket_action)
#define curl_share_cleanup       (sbx__curl.curl_share_cleanup)
#define curl_share_init          (sbx__curl.curl_share_init)
#define curl_share_setopt        (sbx__curl.curl_share_setopt)
#define curl_slist_append        (sbx__curl.curl_slist_append)
#define curl_slist_free_all      (sbx__curl.curl_slist_free_all)

#endif

/* The rclone remote of a manifest mount entry (rclone.h, docs/internals/mounts.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dl-crypto.h"
#include "providers/local/supervisor/rclone.h"
#include "sbx/b64.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/secret.h"

#define CONFIG_MAX (64 * 1024)

static const char *field(const struct sbx_manifest_entry *e, const char *name)
{
    const char *v = sbx_manifest_entry_field(e, name);
    return v && *v ? v : NULL;
}

static const char *secret(const struct sbx_manifest_entry *e, const char *name)
{
    const struct sbx_secret *s = sbx_manifest_entry_secret(e, name);
    return s ? sbx_secret_reveal(s, NULL) : NULL;
}

/* "key = value" unless value is NULL; values holding a line break are refused (they would
 * add lines to the config). */
static int put(struct sbx_buf *b, const char *key, const char *value, struct sbx_error *err)
{
    if (!value)
        return 0;
    if (strpbrk(value, "\r\n"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not hold a line break", key);
    return sbx_buf_addf(b, err, "%s = %s\n", key, value);
}

/* An account SAS URL for endpoint, signed with the account key: rclone's azureblob backend
 * takes a custom endpoint (Azurite) only that way. Valid for 30 days. */
static int azure_sas(const char *endpoint, const char *account, const char *key, char **out,
                     struct sbx_error *err)
{
    struct sbx_buf raw, sig;
    sbx_buf_init(&raw, 1024);
    sbx_buf_init(&sig, 1024);
    char expiry[32];
    time_t t = time(NULL) + 30 * 24 * 3600;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(expiry, sizeof(expiry), "%Y-%m-%dT%H:%M:%SZ", &tm);
    int rc = sbx__crypto_load(err);
    if (rc < 0)
        goto out;
    rc = sbx_b64_decode(key, strlen(key), &raw, err);
    if (rc < 0) {
        sbx_error_prefix(err, "credential 'account_key'");
        goto out;
    }
    char *to_sign = sbx_xasprintf("%s\nrwdlacup\nb\nsco\n\n%s\n\nhttps,http\n2019-02-02\n", account,
                                  expiry);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned maclen = 0;
    HMAC(EVP_sha256(), raw.data, (int)raw.len, (const unsigned char *)to_sign, strlen(to_sign), mac,
         &maclen);
    free(to_sign);
    if ((rc = sbx_b64_encode(mac, maclen, &sig, err)) < 0)
        goto out;
    struct sbx_buf url;
    sbx_buf_init(&url, 4096);
    rc = sbx_buf_addf(&url, err,
                      "%s?sv=2019-02-02&ss=b&srt=sco&sp=rwdlacup&se=%s&spr=https,http&sig=",
                      endpoint, expiry);
    const char *s = sbx_buf_cstr(&sig);
    for (; rc == 0 && *s; s++)
        rc = *s == '+'   ? sbx_buf_adds(&url, "%2B", err)
             : *s == '/' ? sbx_buf_adds(&url, "%2F", err)
             : *s == '=' ? sbx_buf_adds(&url, "%3D", err)
                         : sbx_buf_addch(&url, *s, err);
    if (rc == 0)
        *out = sbx_xstrdup(sbx_buf_cstr(&url));
    sbx_buf_release(&url);
out:
    if (raw.data)
        explicit_bzero(raw.data, raw.len);
    sbx_buf_release(&raw);
    sbx_buf_release(&sig);
    return rc;
}

static int s3_remote(const struct sbx_manifest_entry *e, struct sbx_buf *b, const char **bucket,
                     struct sbx_error *err)
{
    const char *provider = NULL, *endpoint = NULL, *region = field(e, "region"), *ak = NULL,
               *sk = NULL;
    char *r2 = NULL;
    int rc;
    *bucket = field(e, "bucket");
    if (e->type == SBX_ENTRY_S3_MOUNT) {
        endpoint = field(e, "endpoint_url");
        provider = field(e, "s3_provider") ? field(e, "s3_provider") : endpoint ? "Other" : "AWS";
        ak = secret(e, "access_key_id");
        sk = secret(e, "secret_access_key");
    } else if (e->type == SBX_ENTRY_R2_MOUNT) {
        provider = "Cloudflare";
        endpoint = field(e, "custom_domain");
        if (!endpoint)
            endpoint = r2 =
                    sbx_xasprintf("https://%s.r2.cloudflarestorage.com", field(e, "account_id"));
        region = "auto";
        ak = secret(e, "access_key_id");
        sk = secret(e, "secret_access_key");
    } else { /* GCS through its S3 interoperability endpoint, HMAC keys */
        provider = "GCS";
        endpoint = field(e, "endpoint_url") ? field(e, "endpoint_url")
                                            : "https://storage.googleapis.com";
        ak = secret(e, "access_id");
        sk = secret(e, "secret_access_key");
    }
    rc = sbx_buf_adds(b, "type = s3\nenv_auth = false\n", err);
    if (rc == 0)
        rc = put(b, "provider", provider, err);
    if (rc == 0)
        rc = put(b, "access_key_id", ak, err);
    if (rc == 0)
        rc = put(b, "secret_access_key", sk, err);
    if (rc == 0)
        rc = put(b, "session_token", secret(e, "session_token"), err);
    if (rc == 0)
        rc = put(b, "region", region ? region : "us-east-1", err);
    if (rc == 0)
        rc = put(b, "endpoint", endpoint, err);
    if (rc == 0 && endpoint)
        rc = sbx_buf_adds(b, "force_path_style = true\n", err);
    free(r2);
    return rc;
}

/* The mount strategy of e: none, or rclone in the sandbox's own terms (the local provider runs
 * rclone itself, on the host, through FUSE, with its own config). */
static int check_strategy(const struct sbx_manifest_entry *e, struct sbx_error *err)
{
    const json_t *ms = e->mount_strategy;
    const char *strat = ms ? json_string_value(json_object_get(ms, "type")) : NULL;
    if (strat && strcmp(strat, "in_container") != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "mount strategy '%s' is not supported by the local provider "
                             "(it mounts with rclone on the host)",
                             strat);
    if (!ms)
        return 0;
    const json_t *pat = json_object_get(ms, "pattern");
    const char *pt = json_string_value(json_object_get(pat, "type"));
    if (pt && strcmp(pt, "rclone") != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "mount pattern '%s' is not supported by the local provider "
                             "(it mounts with rclone on the host)",
                             pt);
    /* The mount is always FUSE: saying so is fine, asking for NFS is not. */
    const json_t *mode = json_object_get(pat, "mode");
    if (mode && (!json_is_string(mode) || strcmp(json_string_value(mode), "fuse") != 0))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "field 'mount_strategy.pattern.mode' must be 'fuse' for the "
                             "local provider (it mounts with rclone through FUSE)");
    static const char *const unsupported[] = {"extra_args", "nfs_addr", "nfs_mount_options",
                                              "remote_name", "config_file_path"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(unsupported); i++)
        if (json_object_get(pat, unsupported[i]))
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "field 'mount_strategy.pattern.%s' is not supported by the "
                                 "local provider (it runs rclone itself, with its own "
                                 "config)",
                                 unsupported[i]);
    return 0;
}

/* GCS: a service account with rclone's own backend, else HMAC keys through S3. */
static int gcs_remote(const struct sbx_manifest_entry *e, struct sbx_buf *b, const char **bucket,
                      struct sbx_error *err)
{
    int rc;
    *bucket = field(e, "bucket");
    if (secret(e, "service_account_credentials") || field(e, "service_account_file")) {
        rc = sbx_buf_adds(b, "type = google cloud storage\nbucket_policy_only = true\n", err);
        if (rc == 0)
            rc = put(b, "service_account_credentials", secret(e, "service_account_credentials"),
                     err);
        if (rc == 0)
            rc = put(b, "service_account_file", field(e, "service_account_file"), err);
        return rc;
    }
    if (secret(e, "access_token"))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "credential 'access_token' is not supported by the local "
                             "provider: give HMAC keys or a service account");
    return s3_remote(e, b, bucket, err);
}

/* Azure Blob: the account and key (or a managed identity), or with a custom endpoint a SAS URL
 * made from the key (*sas: caller wipes and frees). */
static int azure_remote(const struct sbx_manifest_entry *e, struct sbx_buf *b, const char **bucket,
                        char **sas, struct sbx_error *err)
{
    const char *account = field(e, "account"), *key = secret(e, "account_key"),
               *endpoint = field(e, "endpoint");
    int rc;
    *bucket = field(e, "container");
    if ((rc = sbx_buf_adds(b, "type = azureblob\n", err)) < 0)
        return rc;
    if (endpoint && key && (rc = azure_sas(endpoint, account, key, sas, err)) == 0)
        return put(b, "sas_url", *sas, err);
    if (rc < 0)
        return rc;
    if (endpoint)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "field 'endpoint' needs credential 'account_key' here");
    rc = put(b, "account", account, err);
    if (rc == 0)
        rc = put(b, "key", key, err);
    if (rc == 0 && field(e, "identity_client_id"))
        rc = sbx_buf_adds(b, "use_msi = true\n", err);
    if (rc == 0)
        rc = put(b, "msi_client_id", field(e, "identity_client_id"), err);
    return rc;
}

/* Box: its OAuth token (or a bare access token as one), client credentials, settings. */
static int box_remote(const struct sbx_manifest_entry *e, struct sbx_buf *b, struct sbx_error *err)
{
    const char *tok = secret(e, "token");
    char *tokjson = NULL;
    if (!tok && secret(e, "access_token"))
        tok = tokjson = sbx_xasprintf("{\"access_token\":\"%s\"}", secret(e, "access_token"));
    int rc = sbx_buf_adds(b, "type = box\n", err);
    const char *keys[] = {"client_id",      "box_config_file", "box_sub_type",
                          "root_folder_id", "impersonate",     "owned_by"};
    for (size_t i = 0; rc == 0 && i < SBX_ARRAY_LEN(keys); i++)
        rc = put(b, keys[i], field(e, keys[i]), err);
    if (rc == 0)
        rc = put(b, "client_secret", secret(e, "client_secret"), err);
    if (rc == 0)
        rc = put(b, "token", tok, err);
    if (rc == 0)
        rc = put(b, "config_credentials", secret(e, "config_credentials"), err);
    free(tokjson);
    return rc;
}

/* The remote "m" of e's type into b; *bucket and *prefix: where in it the mount starts. */
static int remote(const struct sbx_manifest_entry *e, struct sbx_buf *b, const char **bucket,
                  const char **prefix, char **sas, struct sbx_error *err)
{
    switch (e->type) {
    case SBX_ENTRY_S3_MOUNT:
    case SBX_ENTRY_R2_MOUNT:
        *prefix = field(e, "prefix");
        return s3_remote(e, b, bucket, err);
    case SBX_ENTRY_GCS_MOUNT:
        *prefix = field(e, "prefix");
        return gcs_remote(e, b, bucket, err);
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
        return azure_remote(e, b, bucket, sas, err);
    case SBX_ENTRY_BOX_MOUNT:
        *prefix = field(e, "path");
        return box_remote(e, b, err);
    case SBX_ENTRY_FILE:
    case SBX_ENTRY_DIR:
    case SBX_ENTRY_LOCAL_FILE:
    case SBX_ENTRY_LOCAL_DIR:
    case SBX_ENTRY_GIT_REPO:
    case SBX_ENTRY_S3_FILES_MOUNT:
        break;
    }
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "not supported by the local provider (S3 Files needs its own NFS "
                         "mount helper; rclone has no backend for it)");
}

int sbx__rclone_mount(const struct sbx_manifest_entry *e, const char *root,
                      struct sbx__local_config_mount *out, struct sbx_error *err)
{
    struct sbx_buf b;
    const char *bucket = NULL, *prefix = NULL;
    char *sas = NULL;
    int rc = check_strategy(e, err);
    if (rc < 0)
        return rc;
    sbx_buf_init(&b, CONFIG_MAX);
    if ((rc = sbx_buf_adds(&b, "[m]\n", err)) == 0)
        rc = remote(e, &b, &bucket, &prefix, &sas, err);
    if (rc == 0) {
        while (prefix && *prefix == '/')
            prefix++;
        const char *b0 = bucket ? bucket : "";
        out->check = sbx_xasprintf("m:%s", b0);
        out->remote = prefix && *prefix ? sbx_xasprintf("m:%s/%s", b0, prefix)
                                        : sbx_xasprintf("m:%s", b0);
        out->config = sbx_xstrdup(sbx_buf_cstr(&b));
        const char *mp = e->mount_path ? e->mount_path : e->path;
        out->dst = mp[0] == '/'             ? sbx_xstrdup(mp)
                   : strcmp(root, "/") == 0 ? sbx_xasprintf("/%s", mp)
                                            : sbx_xasprintf("%s/%s", root, mp);
        out->entry = sbx_xasprintf("'%s' (%s)", e->path, sbx_entry_type_name(e->type));
        out->writable = !e->read_only;
    }
    if (sas)
        explicit_bzero(sas, strlen(sas));
    free(sas);
    if (b.data)
        explicit_bzero(b.data, b.len);
    sbx_buf_release(&b);
    return rc;
}

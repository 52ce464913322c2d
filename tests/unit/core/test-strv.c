#include <stdlib.h>

#include "tap.h"
#include "sbx/strv.h"

static void test_push_find_detach(void)
{
    struct sbx_strv sv;
    sbx_strv_init(&sv);
    CHECK_EQ_INT(sv.n, 0);
    CHECK(sv.v[0] == NULL);
    for (int i = 0; i < 20; i++)
        sbx_strv_pushf(&sv, "item%d", i);
    CHECK_EQ_INT(sv.n, 20);
    CHECK_EQ_STR(sv.v[19], "item19");
    CHECK(sv.v[20] == NULL);
    CHECK_EQ_INT(sbx_strv_find(&sv, "item7"), 7);
    CHECK_EQ_INT(sbx_strv_find(&sv, "nope"), -1);
    sbx_strv_pop(&sv);
    CHECK_EQ_INT(sv.n, 19);
    CHECK(sv.v[19] == NULL);
    const char *const more[] = {"x", "y", NULL};
    sbx_strv_pushv(&sv, more);
    CHECK_EQ_STR(sv.v[20], "y");
    char **v = sbx_strv_detach(&sv);
    CHECK_EQ_INT(sv.n, 0);
    CHECK_EQ_STR(v[0], "item0");
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
    sbx_strv_release(&sv);
}

static void test_env(void)
{
    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx_strv_setenv(&env, "PATH", "/bin");
    sbx_strv_setenv(&env, "PATHX", "nope");
    sbx_strv_setenv(&env, "PATH", "/usr/bin");
    CHECK_EQ_INT(env.n, 2);
    CHECK_EQ_STR(sbx_strv_getenv(&env, "PATH"), "/usr/bin");
    CHECK_EQ_STR(sbx_strv_getenv(&env, "PATHX"), "nope");
    CHECK(sbx_strv_getenv(&env, "PAT") == NULL);
    sbx_strv_release(&env);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_push_find_detach);
    TAP_RUN(test_env);
    return TAP_DONE();
}

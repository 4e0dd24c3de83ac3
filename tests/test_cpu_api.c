/*
 * The public query of this CPU (a2amm_cpu_*, a2amm_kernel_level*): every
 * feature and level has a name, the ends of the lists are refused, "used"
 * is "detected and not hidden", A2AMM_CPU_HIDE hides what it names (and
 * everything above it) and the levels that need them, a bad list is refused
 * naming its entry, and the level a2amm_kernel picks is one that runs here.
 * Checked against this CPU's own answers with features hidden in turn, so
 * it holds on any x86-64 CPU.
 */
#include <stdlib.h>

#include "a2amm.h"
#include "check.h"

static int feature_index(const char *want)
{
    const char *name;
    for (int i = 0; a2amm_cpu_feature(i, &name, NULL, NULL, NULL, NULL) == A2AMM_OK; i++)
        if (!strcmp(name, want)) return i;
    return -1;
}

static int used(const char *feature)
{
    int u = 0;
    CHECK(a2amm_cpu_feature(feature_index(feature), NULL, NULL, NULL, &u, NULL) == A2AMM_OK, "feature %s", feature);
    return u;
}

static int level_runs(const char *want)
{
    const char *name, *why;
    for (int i = 0; a2amm_kernel_level(i, &name, &why, NULL) == A2AMM_OK; i++)
        if (!strcmp(name, want)) return why == NULL;
    CHECK(0, "no level named %s", want);
    return 0;
}

/* The lists, as seen with A2AMM_CPU_HIDE as set now. */
static void check_lists(const char *hide)
{
    a2amm_error err;
    int nf = a2amm_cpu_feature_count(), nl = a2amm_kernel_level_count();
    CHECK(nf >= 8, "%d features", nf);
    CHECK(nl == 4, "%d kernel levels", nl);
    for (int i = 0; i < nf; i++) {
        const char *name = NULL;
        int d = -1, h = -1, u = -1;
        CHECK(a2amm_cpu_feature(i, &name, &d, &h, &u, NULL) == A2AMM_OK, "feature %d", i);
        CHECK(name && *name, "feature %d has a name", i);
        CHECK(u == (d && !h), "%s: used %d, detected %d, hidden %d (hide %s)", name, u, d, h, hide);
    }
    CHECK(a2amm_cpu_feature(nf, NULL, NULL, NULL, NULL, &err) == A2AMM_E_INVAL && strstr(err.msg, "index"), "past the end: %s", err.msg);
    CHECK(a2amm_cpu_feature(-1, NULL, NULL, NULL, NULL, NULL) == A2AMM_E_INVAL, "before the start");
    CHECK(a2amm_kernel_level(nl, NULL, NULL, NULL) == A2AMM_E_INVAL, "level past the end");
    CHECK(a2amm_kernel_level(-1, NULL, NULL, NULL) == A2AMM_E_INVAL, "level before the start");
    const char *first = NULL, *why = "x";
    CHECK(a2amm_kernel_level(0, &first, &why, NULL) == A2AMM_OK && first && !strcmp(first, "ref") && !why,
          "level 0 is ref and runs everywhere");
    /* each level runs exactly where the features it needs are used */
    CHECK(level_runs("avx2") == (used("avx2") && used("fma")), "avx2 level vs features (hide %s)", hide);
    CHECK(level_runs("avx512") == (used("avx512f") && used("avx512bw") && used("avx512_vbmi") && used("avx512_bf16")),
          "avx512 level vs features (hide %s)", hide);
    CHECK(level_runs("amx") == (level_runs("avx512") && used("amx_tile") && used("amx_bf16")),
          "amx level vs features (hide %s)", hide);
    /* the level picked runs, and none above it does */
    const char *picked = NULL;
    if (a2amm_cpu_env_check(&err) != A2AMM_OK) { /* a bad list: no level is picked, and the reason says why */
        CHECK(a2amm_kernel(&picked, &err) == A2AMM_E_INVAL && !picked && strstr(err.msg, "A2AMM_CPU_HIDE"),
              "a bad list refused by a2amm_kernel: %s", err.msg);
        return;
    }
    CHECK(a2amm_kernel(&picked, &err) == A2AMM_OK && picked, "a level is picked (hide %s)", hide);
    if (!picked) return;
    CHECK(level_runs(picked), "the picked level %s runs", picked);
    int seen = 0;
    const char *name;
    for (int i = 0; a2amm_kernel_level(i, &name, &why, NULL) == A2AMM_OK; i++) {
        if (seen) CHECK(why != NULL, "level %s above the picked %s runs (hide %s)", name, picked, hide);
        seen |= !strcmp(name, picked);
    }
}

/* The checks of one A2AMM_CPU_HIDE setting, in a process of its own (the
 * library reads the variable once): had = what the CPU has unhidden. */
static void check_hidden(const char *hide, int had_avx2, int had_avx512)
{
    a2amm_error err;
    check_lists(hide);
    const char *picked = NULL, *why = NULL;
    if (!strcmp(hide, "amx")) {
        CHECK(!used("amx_tile") && !used("amx_bf16") && !level_runs("amx"), "amx hidden");
        CHECK(used("avx512f") == had_avx512, "hiding amx keeps AVX-512");
    } else if (!strcmp(hide, "avx512")) {
        CHECK(!used("avx512f") && !used("avx512_bf16") && !used("amx_tile") && !level_runs("avx512"), "avx512 hidden");
        CHECK(used("avx2") == had_avx2, "hiding avx512 keeps AVX2");
    } else if (!strcmp(hide, "avx512bf16")) {
        CHECK(!used("avx512_bf16") && !used("amx_bf16") && used("avx512f") == had_avx512,
              "avx512bf16 hidden, avx512f kept");
    } else if (!strcmp(hide, "avx2")) {
        CHECK(!level_runs("avx2") && !level_runs("avx512") && !level_runs("amx"), "avx2 hidden: ref only");
        CHECK(a2amm_kernel(&picked, &err) == A2AMM_OK && picked && !strcmp(picked, "ref"), "avx2 hidden: ref picked");
        a2amm_kernel_level(1, NULL, &why, NULL);
        CHECK(why && (had_avx2 ? strstr(why, "A2AMM_CPU_HIDE") != NULL : 1), "the reason: %s", why ? why : "(none)");
    } else if (!strcmp(hide, "amx,sse9")) {
        /* a bad list is refused, naming the entry, and then hides nothing */
        CHECK(a2amm_cpu_env_check(&err) == A2AMM_E_INVAL && strstr(err.msg, "sse9"), "bad entry named: %s", err.msg);
        CHECK(used("avx2") == had_avx2 && used("avx512f") == had_avx512, "a bad list hides nothing");
    } else {
        CHECK(a2amm_cpu_env_check(&err) == A2AMM_OK, "%s accepted", hide);
    }
}

int main(int argc, char **argv)
{
    unsetenv("A2AMM_ISA");
    if (argc == 4) { /* one hidden setting: test_cpu_api HIDE HAD_AVX2 HAD_AVX512 */
        check_hidden(argv[1], atoi(argv[2]), atoi(argv[3]));
        return check_summary(argv[1]);
    }
    a2amm_error err;
    unsetenv("A2AMM_CPU_HIDE");
    CHECK(a2amm_cpu_env_check(&err) == A2AMM_OK, "unset");
    CHECK(a2amm_cpu_model() && *a2amm_cpu_model(), "a model name");
    CHECK(a2amm_cpu_cores() >= 1, "%d cores", a2amm_cpu_cores());
    check_lists("(unset)");
    char cmd[4096];
    const char *hides[] = {"amx", "avx512", "avx512bf16", "avx2", "amx,sse9", "none"};
    for (size_t i = 0; i < sizeof hides / sizeof hides[0]; i++) {
        snprintf(cmd, sizeof cmd, "A2AMM_CPU_HIDE='%s' '%s' '%s' %d %d", hides[i], argv[0], hides[i], used("avx2"),
                 used("avx512f"));
        CHECK(system(cmd) == 0, "the checks with A2AMM_CPU_HIDE=%s", hides[i]);
    }
    return check_summary("test_cpu_api");
}

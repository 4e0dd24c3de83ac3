/* `a2amm cpu`: what this CPU runs as the library sees it (features, hidden
 * features, kernel levels), for users and for tests that touch hardware;
 * through the public API only (a2amm_cpu_*, a2amm_kernel_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "a2amm.h"
#include "cli/args.h"
#include "cli/json.h"
#include "cli/commands.h"

static void cpu_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm cpu [--json] [--runs LEVEL]\n"
            "\n"
            "Says what a2amm finds on this CPU at run time: its model, the features the\n"
            "kernels use (detected, hidden), which kernel level each of ref, avx2, avx512\n"
            "and amx can run (and why not), and the level run and bench pick.\n"
            "\n"
            "  A2AMM_CPU_HIDE=LIST   hide features from a2amm's detection, as on a CPU that\n"
            "                        lacks them: a comma-separated list of amx, avx512bf16,\n"
            "                        avx512, avx2; each hides its feature and every one\n"
            "                        above it (amx -> avx512 level, avx512bf16 or avx512\n"
            "                        -> avx2, avx2 -> ref). Every a2amm command honours it.\n"
            "  A2AMM_ISA=LEVEL       force one level (refused where it cannot run).\n"
            "\n"
            "options:\n"
            "  --json        one JSON object on stdout\n"
            "  --runs LEVEL  print nothing else; exit 0 if LEVEL runs here, 1 (saying why)\n"
            "                if it does not\n"
            "\n"
            "example:\n"
            "  A2AMM_CPU_HIDE=amx,avx512 a2amm cpu\n");
}

static int find_level(const char *name)
{
    const char *level;
    for (int i = 0; a2amm_kernel_level(i, &level, NULL, NULL) == A2AMM_OK; i++)
        if (!strcmp(name, level)) return i;
    return -1;
}

/* `selected`: the level run and bench use, or NULL where none can run. */
static void print_json(const char *hide, const char *selected, int forced)
{
    printf("{\"command\":\"cpu\"");
    cli_json_key_str("model", a2amm_cpu_model());
    printf(",\"cores\":%d", a2amm_cpu_cores());
    cli_json_key_str("hide", hide);
    printf(",\"features\":{");
    const char *name, *why;
    int detected, hidden, used;
    for (int f = 0; a2amm_cpu_feature(f, &name, &detected, &hidden, &used, NULL) == A2AMM_OK; f++)
        printf("%s\"%s\":{\"detected\":%s,\"hidden\":%s,\"used\":%s}", f ? "," : "", name,
               detected ? "true" : "false", hidden ? "true" : "false", used ? "true" : "false");
    printf("},\"levels\":{");
    for (int i = 0; a2amm_kernel_level(i, &name, &why, NULL) == A2AMM_OK; i++) {
        printf("%s\"%s\":{\"runs\":%s", i ? "," : "", name, why ? "false" : "true");
        cli_json_key_str("why_not", why);
        printf("}");
    }
    printf("}");
    cli_json_key_str("selected", selected);
    printf(",\"forced\":%s}\n", forced ? "true" : "false");
}

static void print_text(const char *hide, const char *selected, int forced)
{
    printf("CPU: %s, %d cores\n", a2amm_cpu_model(), a2amm_cpu_cores());
    printf("A2AMM_CPU_HIDE=%s\n\nfeatures the kernels use:\n", hide ? hide : "(unset)");
    const char *name, *why;
    int detected, hidden;
    for (int f = 0; a2amm_cpu_feature(f, &name, &detected, &hidden, NULL, NULL) == A2AMM_OK; f++)
        printf("  %-12s %s\n", name,
               !detected ? "absent" : hidden ? "present, hidden by A2AMM_CPU_HIDE" : "present");
    printf("\nkernel levels:\n");
    for (int i = 0; a2amm_kernel_level(i, &name, &why, NULL) == A2AMM_OK; i++)
        printf("  %-7s %s%s\n", name, why ? "no: " : "runs", why ? why : "");
    if (selected)
        printf("\nrun and bench use: %s (%s)\n", selected, forced ? "forced by A2AMM_ISA" : "the best this CPU runs");
}

int cmd_cpu(int argc, char **argv)
{
    int json = 0;
    const char *runs = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cpu_usage(stdout);
            return 0;
        }
        int m = cli_option(argc, argv, &i, "--runs", &runs);
        if (m < 0) return 2;
        if (m) continue;
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        fprintf(stderr, "a2amm cpu: unknown option '%s' (try a2amm cpu --help)\n", argv[i]);
        return 2;
    }
    a2amm_error err = {0, ""};
    int rc = a2amm_cpu_env_check(&err);
    if (rc) {
        cli_print_error("cpu", &err);
        return 2;
    }
    if (runs) {
        int level = find_level(runs);
        if (level < 0) {
            fprintf(stderr, "a2amm cpu: --runs must be ref, avx2, avx512 or amx (got '%s')\n", runs);
            return 2;
        }
        const char *why = NULL;
        a2amm_kernel_level(level, NULL, &why, NULL);
        if (!why) return 0;
        printf("%s: %s\n", runs, why);
        return 1;
    }
    const char *forced = getenv("A2AMM_ISA"), *selected = NULL;
    a2amm_kernel(&selected, &err);
    const char *hide = getenv("A2AMM_CPU_HIDE");
    if (json) print_json(hide, selected, forced && *forced);
    else print_text(hide, selected, forced && *forced);
    if (!selected) {
        cli_print_error("cpu", &err);
        return 1;
    }
    return 0;
}

/* `a2amm cpu`: what this CPU runs as the library sees it (features, hidden
 * features, kernel levels), for users and for tests that touch hardware. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/json.h"
#include "cli/commands.h"
#include "common/cpu.h"
#include "common/pool.h"
#include "gemm/gemm.h"

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
            "                        lacks them: a comma-separated list of " CPU_HIDE_NAMES ";\n"
            "                        each hides its feature and every one above it\n"
            "                        (amx -> avx512 level, avx512bf16 or avx512 -> avx2,\n"
            "                        avx2 -> ref). Every a2amm command honours it.\n"
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
    for (int i = 0; i < GEMM_ISA_COUNT; i++)
        if (!strcmp(name, gemm_isa_name((gemm_isa)i))) return i;
    return -1;
}

static void print_json(const char *hide, int selected, int forced)
{
    printf("{\"command\":\"cpu\"");
    cli_json_key_str("model", cpu_model_name());
    printf(",\"cores\":%d", pool_cpu_count());
    cli_json_key_str("hide", hide);
    printf(",\"features\":{");
    for (int f = 0; f < CPU_FEATURE_COUNT; f++)
        printf("%s\"%s\":{\"detected\":%s,\"hidden\":%s,\"used\":%s}", f ? "," : "", cpu_feature_name((cpu_feature)f),
               cpu_detected((cpu_feature)f) ? "true" : "false", cpu_hidden((cpu_feature)f) ? "true" : "false",
               cpu_has((cpu_feature)f) ? "true" : "false");
    printf("},\"levels\":{");
    for (int i = 0; i < GEMM_ISA_COUNT; i++) {
        printf("%s\"%s\":{\"runs\":%s", i ? "," : "", gemm_isa_name((gemm_isa)i),
               gemm_isa_supported((gemm_isa)i) ? "true" : "false");
        cli_json_key_str("why_not", gemm_isa_why_not((gemm_isa)i));
        printf("}");
    }
    printf("}");
    cli_json_key_str("selected", selected >= 0 ? gemm_isa_name((gemm_isa)selected) : NULL);
    printf(",\"forced\":%s}\n", forced ? "true" : "false");
}

static void print_text(const char *hide, int selected, int forced)
{
    printf("CPU: %s, %d cores\n", cpu_model_name(), pool_cpu_count());
    printf("A2AMM_CPU_HIDE=%s\n\nfeatures the kernels use:\n", hide ? hide : "(unset)");
    for (int f = 0; f < CPU_FEATURE_COUNT; f++) {
        cpu_feature x = (cpu_feature)f;
        printf("  %-12s %s\n", cpu_feature_name(x),
               !cpu_detected(x) ? "absent" : cpu_hidden(x) ? "present, hidden by A2AMM_CPU_HIDE" : "present");
    }
    printf("\nkernel levels:\n");
    for (int i = 0; i < GEMM_ISA_COUNT; i++) {
        const char *why = gemm_isa_why_not((gemm_isa)i);
        printf("  %-7s %s%s\n", gemm_isa_name((gemm_isa)i), why ? "no: " : "runs", why ? why : "");
    }
    if (selected >= 0)
        printf("\nrun and bench use: %s (%s)\n", gemm_isa_name((gemm_isa)selected),
               forced ? "forced by A2AMM_ISA" : "the best this CPU runs");
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
    int rc = cpu_hide_check(&err);
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
        const char *why = gemm_isa_why_not((gemm_isa)level);
        if (!why) return 0;
        printf("%s: %s\n", runs, why);
        return 1;
    }
    gemm_isa isa = GEMM_ISA_REF;
    const char *forced = getenv("A2AMM_ISA");
    int selected = gemm_isa_select(&isa, &err) == A2AMM_OK ? (int)isa : -1;
    const char *hide = getenv("A2AMM_CPU_HIDE");
    if (json) print_json(hide, selected, forced && *forced);
    else print_text(hide, selected, forced && *forced);
    if (selected < 0) {
        cli_print_error("cpu", &err);
        return 1;
    }
    return 0;
}

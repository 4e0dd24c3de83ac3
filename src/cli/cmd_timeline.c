/* `a2amm timeline FILE.json [-o FILE.svg]`: a trace drawn as one picture (timeline.h). */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/out_path.h"
#include "common/error.h"
#include "cli/timeline.h"

static void timeline_usage(FILE *f)
{
    fprintf(f,
            "usage: a2amm timeline TRACE.json [-o PICTURE.svg] [options]\n"
            "\n"
            "Draws a trace that run or bench op wrote with --trace as one SVG picture: the\n"
            "ranks as rows, time across; per rank its op calls (and perf mode's variants),\n"
            "its tiles numbered, its matmuls, waits for rows (those that stalled it in red,\n"
            "marked above), barriers and sends. The MoE op's trace: per rank its calls, each\n"
            "chunk's dispatch and combine, and each expert a bar of its own labelled with\n"
            "its number among all E, in a lane per compute thread. A legend of the kinds\n"
            "drawn, a time axis, and perf mode's figures (fused vs matmul alone, exposed\n"
            "communication) in the title. Spans narrower than a pixel merge, so thousands of\n"
            "tiles stay one readable picture; open the JSON itself in Perfetto\n"
            "(ui.perfetto.dev) or chrome://tracing to zoom.\n"
            "\n"
            "options:\n"
            "  -o FILE            the picture (default: TRACE with .json replaced by .svg); it is\n"
            "                     replaced whole: a device, a FIFO, a folder or TRACE is refused\n"
            "  --call N           only call N's time (perf mode repeats calls; 1 is the first)\n"
            "  --width PX         the picture's width (default 1400)\n"
            "  --stall-us US      a wait at least this long is a stall (default: a quarter of\n"
            "                     the median tile, at least 20 us)\n"
            "\n"
            "example:\n"
            "  a2amm gen 2048 1024 512 4 --dir /tmp/trace-demo --no-golden\n"
            "  a2amm run 2048 1024 512 4 perf --iters 3 --dir /tmp/trace-demo --path put --tile-m 128 --trace /tmp/t.json\n"
            "  a2amm timeline /tmp/t.json -o /tmp/t.svg --call 3\n");
}

/* Whether path is absent, empty, or an SVG picture (what -o may replace): "<svg" in its first bytes. */
static int looks_like_svg(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    char head[513];
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!head[i]) head[i] = ' '; /* a binary file's NULs end no search early */
    return n == 0 || strstr(head, "<svg") != NULL;
}

int cmd_timeline(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *v;
    timeline_options o = {1400, 0, 0};
    for (int i = 1; i < argc; i++) {
        int m;
        int64_t x;
        if (cli_is_help(argv[i])) { timeline_usage(stdout); return 0; }
        if ((m = cli_option(argc, argv, &i, "-o", &v))) { if (m < 0) return 2; out = v; }
        else if ((m = cli_option(argc, argv, &i, "--call", &v))) {
            if (m < 0 || cli_parse_i64("timeline", "--call", v, 1, INT64_C(1) << 40, &o.call)) return 2;
        } else if ((m = cli_option(argc, argv, &i, "--width", &v))) {
            if (m < 0 || cli_parse_i64("timeline", "--width", v, 300, 100000, &x)) return 2;
            o.width = (int)x;
        } else if ((m = cli_option(argc, argv, &i, "--stall-us", &v))) {
            if (m < 0 || cli_parse_double("timeline", "--stall-us", v, 0.001, 1e12, &o.stall_us)) return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "a2amm timeline: unknown option '%s' (see a2amm timeline --help)\n", argv[i]);
            return 2;
        } else if (!in) in = argv[i];
        else {
            fprintf(stderr, "a2amm timeline: one trace at a time (got '%s' after '%s')\n", argv[i], in);
            return 2;
        }
    }
    if (!in) {
        fprintf(stderr, "a2amm timeline: expected a trace file (written by run or bench op with --trace FILE)\n");
        timeline_usage(stderr);
        return 2;
    }
    char def[4096];
    if (!out) { /* TRACE.json -> TRACE.svg; another name gets .svg added */
        size_t n = strlen(in);
        int w = n > 5 && !strcmp(in + n - 5, ".json") ? snprintf(def, sizeof def, "%.*s.svg", (int)(n - 5), in)
                                                      : snprintf(def, sizeof def, "%s.svg", in);
        if (w < 0 || (size_t)w >= sizeof def) {
            fprintf(stderr, "a2amm timeline: the trace's name is too long; give -o\n");
            return 2;
        }
        out = def;
    }
    /* the picture replaces what is at -o: never a device, a FIFO, a folder or the trace it draws */
    a2amm_error err = {0, ""};
    if (!cli_check_output("-o", out, NULL, 0, &err) && cli_same_file(out, in))
        a2amm_fail(&err, A2AMM_E_INVAL, "-o: %s would replace %s, the trace it draws: refused; name another file",
                   out, in);
    if (!err.code && !looks_like_svg(out))
        a2amm_fail(&err, A2AMM_E_INVAL, "-o: %s is there and is not an SVG picture (a data file?): refused; name "
                   "another file, or remove it first", out);
    if (err.code) {
        cli_print_error("timeline", &err);
        return 2;
    }
    timeline_stats st;
    if (timeline_render(in, out, &o, &st, &err)) {
        cli_print_error("timeline", &err);
        return 1;
    }
    printf("a2amm timeline: %s: %d rank%s, %zu spans over %.3f ms drawn as %zu shapes (%zu stalled waits, >= %.0f "
           "us)\n  wrote %s\n",
           in, st.ranks, st.ranks == 1 ? "" : "s", st.spans, (st.to_us - st.from_us) / 1e3, st.shapes, st.stalls,
           st.stall_us, out);
    return 0;
}

/* The trace drawn as SVG (see timeline.h). */
#include "cli/timeline.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/json_read.h"
#include "io/io.h"
#include "common/error.h"

/* What is drawn, in drawing order; each has a band of its rank's row and a colour. */
typedef enum tl_kind {
    TL_VARIANT, TL_CALL, TL_TILE, TL_BARRIER, TL_EXCHANGE, TL_PREPARE, TL_WRITE, TL_MATMUL, TL_WAIT, TL_STALL,
    TL_SEND, TL_SIGNAL, TL_EXPERT, TL_KINDS
} tl_kind;

static const struct {
    const char *cat;    /* the trace's category */
    const char *name;   /* the SVG's class for it: k-NAME, on its shapes and its legend's swatch */
    const char *legend;
    const char *colour;
    int band;           /* 0: calls, 1: tiles, 2: the rank's work and waits, 3: sends and signals */
} KIND[TL_KINDS] = {
    [TL_VARIANT] = {"variant", "variant", "perf variant", "#cfd8dc", 0},
    [TL_CALL] = {"call", "call", "op call", "#78909c", 0},
    [TL_TILE] = {"tile", "tile", "tile (numbered)", "#ffe082", 1},
    [TL_BARRIER] = {"barrier", "barrier", "barrier", "#9e9e9e", 2},
    [TL_EXCHANGE] = {"exchange", "exchange", "AllToAll (unfused)", "#8e24aa", 2},
    [TL_PREPARE] = {"prepare", "prepare", "B preparation", "#6d4c41", 2},
    [TL_WRITE] = {"write", "write", "output write", "#00897b", 2},
    [TL_MATMUL] = {"matmul", "matmul", "matmul", "#43a047", 2},
    [TL_WAIT] = {"wait", "wait", "wait for rows", "#fb8c00", 2},
    [TL_STALL] = {NULL, "stall", "stalled wait", "#e53935", 2},
    [TL_SEND] = {"send", "send", "send", "#1e88e5", 3},
    [TL_SIGNAL] = {"signal", "signal", "signal", "#0d47a1", 3},
    /* the MoE op's work spans (an expert each); the matmul ops' (a compute thread's piece) are not drawn */
    [TL_EXPERT] = {"work", "expert", "expert", "#66bb6a", 2},
};

enum { BANDS = 4 };
static const double BAND_Y[BANDS] = {0.00, 0.16, 0.46, 0.86}; /* of the row's height */
static const double BAND_H[BANDS] = {0.13, 0.28, 0.38, 0.12};

typedef struct tl_span {
    double t0, t1; /* us */
    int rank, kind;
    int lane;            /* TL_EXPERT: its compute thread's lane in the rank's row (0 otherwise) */
    long long tile, call;
    long long slot;      /* the MoE op's exchange: 0 dispatch, 1 combine */
    long long expert;    /* TL_EXPERT: its number among all E */
    double tid;          /* TL_EXPERT: its thread in the trace (lane's source) */
    const char *variant; /* TL_VARIANT: its name (points into the parsed JSON) */
} tl_span;

typedef struct tl_picture {
    tl_span *spans;
    size_t n;
    int ranks;
    int moe;         /* the MoE op's trace: its own layout of a row (see span_box) */
    int lanes;       /* the MoE op's: a lane per compute thread that ran an expert */
    double from, to; /* us */
    int width, height, left, top, row_h;
    int present[TL_KINDS]; /* the kinds drawn in the window: the legend's entries */
    FILE *f;
    size_t shapes, stalls;
} tl_picture;

static double px_of(const tl_picture *p, double t)
{
    return p->left + (t - p->from) / (p->to - p->from) * (double)(p->width - p->left - 20);
}

static int kind_of_cat(const char *cat, int moe)
{
    for (int k = 0; k < TL_KINDS; k++)
        if (KIND[k].cat && cat && !strcmp(KIND[k].cat, cat)) return k == TL_EXPERT && !moe ? -1 : k;
    return -1;
}

static int read_file(const char *path, char **text, size_t *len, a2amm_error *err)
{
    struct stat st;
    int fd = io_open_regular(path, &st, err); /* a FIFO or a folder is refused at once */
    if (fd < 0) return fd;
    *len = (size_t)st.st_size;
    *text = malloc(*len + 1);
    size_t got = 0;
    while (*text && got < *len) {
        ssize_t n = read(fd, *text + got, *len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (!*text || got != *len) {
        free(*text);
        return a2amm_fail(err, A2AMM_E_IO, "cannot read %s (%zu bytes)", path, *len);
    }
    (*text)[*len] = '\0';
    return A2AMM_OK;
}

/* A whole number of a trace (anyone's file), or dflt where it is none or out of range. */
static long long json_whole(const json_value *v, long long dflt)
{
    double x = json_number(v, NAN);
    return x == floor(x) && fabs(x) <= 1e15 ? (long long)x : dflt;
}

/* The spans of the trace's events (those of kinds drawn here); the ranks seen. */
static int collect_spans(const json_value *events, const char *path, tl_picture *p, a2amm_error *err)
{
    p->spans = calloc(events->n ? events->n : 1, sizeof *p->spans);
    if (!p->spans) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory for %zu events", events->n);
    for (size_t i = 0; i < events->n; i++) {
        const json_value *e = &events->items[i];
        const char *ph = json_string(json_get(e, "ph"));
        int kind = kind_of_cat(json_string(json_get(e, "cat")), p->moe);
        if (!ph || kind < 0 || (strcmp(ph, "X") && strcmp(ph, "i"))) continue;
        double pid = json_number(json_get(e, "pid"), -1), ts = json_number(json_get(e, "ts"), NAN);
        double dur = json_number(json_get(e, "dur"), 0);
        if (pid < 0 || pid > 65535 || pid != floor(pid) || !isfinite(ts) || !(dur >= 0))
            return a2amm_fail(err, A2AMM_E_FORMAT, "%s: event %zu has no valid pid (a rank), ts or dur", path, i);
        const json_value *args = json_get(e, "args");
        tl_span *s = &p->spans[p->n++];
        *s = (tl_span){.t0 = ts, .t1 = ts + dur, .rank = (int)pid, .kind = kind,
                       .tile = json_whole(json_get(args, "tile"), -1), .call = json_whole(json_get(args, "call"), -1),
                       .slot = json_whole(json_get(args, "slot"), -1), .expert = -1};
        const char *name = json_string(json_get(e, "name"));
        if (kind == TL_VARIANT) s->variant = name && !strncmp(name, "perf: ", 6) ? name + 6 : name;
        if (kind == TL_EXPERT) { /* its number among all E: args.expert, or the name ("expert N (R rows)") */
            s->expert = json_whole(json_get(args, "expert"), -1);
            if (s->expert < 0 && name && !strncmp(name, "expert ", 7)) {
                char *end;
                errno = 0;
                long long nx = strtoll(name + 7, &end, 10);
                s->expert = end > name + 7 && !errno ? nx : -1;
            }
            if (s->expert < 0) s->expert = -1;
            s->tid = json_number(json_get(e, "tid"), 0);
            if (!isfinite(s->tid)) s->tid = 0;
        }
        if (s->rank + 1 > p->ranks) p->ranks = s->rank + 1;
    }
    if (p->n == 0) return a2amm_fail(err, A2AMM_E_FORMAT, "%s: no spans a2amm draws (is it an a2amm --trace file?)", path);
    return A2AMM_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A quarter of the median tile's length, at least 20 us. */
static double auto_stall_us(const tl_picture *p)
{
    size_t nt = 0;
    double *d = malloc(p->n * sizeof *d);
    for (size_t i = 0; d && i < p->n; i++)
        if (p->spans[i].kind == TL_TILE) d[nt++] = p->spans[i].t1 - p->spans[i].t0;
    double med = 0;
    if (nt) {
        qsort(d, nt, sizeof *d, cmp_double);
        med = d[nt / 2];
    }
    free(d);
    return fmax(20.0, 0.25 * med);
}

/* The MoE op's experts: a lane for each thread that ran one, in the threads' order (a trace's tids are
 * anyone's numbers, so they are ranked, never used as a lane's place). */
static int assign_lanes(tl_picture *p, a2amm_error *err)
{
    size_t nt = 0;
    double *tid = malloc((p->n ? p->n : 1) * sizeof *tid);
    if (!tid) return a2amm_fail(err, A2AMM_E_NOMEM, "out of memory for %zu spans", p->n);
    for (size_t i = 0; i < p->n; i++)
        if (p->spans[i].kind == TL_EXPERT) tid[nt++] = p->spans[i].tid;
    qsort(tid, nt, sizeof *tid, cmp_double);
    size_t distinct = 0;
    for (size_t i = 0; i < nt; i++)
        if (!distinct || tid[i] != tid[distinct - 1]) tid[distinct++] = tid[i];
    for (size_t i = 0; i < p->n; i++) {
        if (p->spans[i].kind != TL_EXPERT) continue;
        size_t lo = 0, hi = distinct; /* the first lane whose tid is not below the span's: its own */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (tid[mid] < p->spans[i].tid) lo = mid + 1;
            else hi = mid;
        }
        p->spans[i].lane = (int)lo;
    }
    p->lanes = distinct > 0 && distinct <= 4096 ? (int)distinct : distinct ? 4096 : 1;
    for (size_t i = 0; i < p->n; i++)
        if (p->spans[i].lane >= p->lanes) p->spans[i].lane = p->lanes - 1;
    free(tid);
    return A2AMM_OK;
}

static int cmp_span(const void *a, const void *b)
{
    const tl_span *x = a, *y = b;
    if (x->rank != y->rank) return x->rank - y->rank;
    if (x->kind != y->kind) return x->kind - y->kind;
    if (x->lane != y->lane) return x->lane - y->lane;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong form, no surrogate, nothing
 * past U+10FFFF) of a character XML allows, or 0. */
static int xml_utf8_length(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return c >= 0x20 || c == '\t' || c == '\n' || c == '\r' ? 1 : 0;
    int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!n) return 0;
    /* the second byte's range narrows for E0 (no overlong), ED (no surrogate), F0 (no overlong), F4 (<= 10FFFF) */
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    if (c == 0xef && s[1] == 0xbf && (s[2] == 0xbe || s[2] == 0xbf)) return 0; /* U+FFFE, U+FFFF */
    return n;
}

/* Text into the SVG: markup escaped, and only characters XML allows: a trace's strings are anyone's
 * bytes, so a byte that starts no well-formed UTF-8 sequence becomes U+FFFD and a control character goes. */
static void xml_text(FILE *f, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    while (s && *s) {
        int n = xml_utf8_length(s);
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else if (n) fwrite(s, 1, (size_t)n, f);
        else if (*s >= 0x80) fputs("\xef\xbf\xbd", f); /* U+FFFD */
        s += n ? n : 1;
    }
}

/* A rectangle of kind k (class k-NAME); title: what a viewer shows on hovering it, or NULL. */
static void rect(tl_picture *p, int k, double x0, double x1, double y, double h, const char *fill, const char *extra,
                 const char *title)
{
    double w = x1 - x0 < 1.0 ? 1.0 : x1 - x0;
    fprintf(p->f, "<rect class=\"k-%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s", KIND[k].name,
            x0, y, w, h, fill, extra ? extra : "");
    if (title) {
        fputs("><title>", p->f);
        xml_text(p->f, title);
        fputs("</title></rect>\n", p->f);
    } else {
        fputs("/>\n", p->f);
    }
    p->shapes++;
}

/*
 * Where a span goes in its rank's row: its y and height. The matmul ops' rows have four bands (calls,
 * tiles, the rank's work and waits, sends and signals). The MoE op's: its calls; the chunks' dispatch and
 * combine (their own band: the overlap schedule runs them beside the experts); a thin bar for each chunk's
 * experts together; and each expert's own bar, in a lane for the thread that ran it.
 */
static void span_box(const tl_picture *p, const tl_span *s, double *y, double *h)
{
    double row = p->top + s->rank * p->row_h, at, size;
    if (p->moe && (s->kind == TL_CALL || s->kind == TL_VARIANT)) at = 0.02, size = 0.10;
    else if (p->moe && s->kind == TL_EXCHANGE) at = 0.15, size = 0.24;
    else if (p->moe && s->kind == TL_MATMUL) at = 0.42, size = 0.07;
    else if (s->kind == TL_EXPERT) {
        double lane = 0.46 / p->lanes;
        at = 0.51 + s->lane * lane, size = lane * (p->lanes > 1 ? 0.9 : 1.0);
    } else {
        int band = KIND[s->kind].band;
        at = BAND_Y[band], size = BAND_H[band];
    }
    *y = row + at * p->row_h, *h = size * p->row_h;
}

/* The experts a merged MoE rectangle holds, for its title: each number once, the first MERGED_MAX of them. */
enum { MERGED_MAX = 24 };
typedef struct merged_experts {
    long long n[MERGED_MAX];
    int count, more;
} merged_experts;

static void merged_add(merged_experts *m, long long expert)
{
    for (int i = 0; i < m->count; i++)
        if (m->n[i] == expert) return;
    if (m->count < MERGED_MAX) m->n[m->count++] = expert;
    else m->more = 1;
}

static void merged_title(const merged_experts *m, int rank, char *buf, size_t size)
{
    size_t at = (size_t)snprintf(buf, size, "expert%s", m->count > 1 ? "s" : "");
    for (int i = 0; i < m->count && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s %lld", i ? "," : "", m->n[i]);
    if (at < size) snprintf(buf + at, size - at, "%s (rank %d; each under a pixel here: merged)", m->more ? ", ..." : "",
                            rank);
}

/* The label drawn in a span's rectangle where it fits (the first of its forms that does), and its title. */
static int span_labels(const tl_picture *p, const tl_span *s, char label[][48], char *title, size_t tsize)
{
    int n = 0;
    title[0] = '\0';
    switch (s->kind) {
    case TL_TILE:
        if (s->tile >= 0) snprintf(label[n++], 48, "%lld", s->tile);
        break;
    case TL_VARIANT:
        if (s->variant) snprintf(label[n++], 48, "%s", s->variant);
        break;
    case TL_CALL:
        if (s->call >= 0) snprintf(label[n++], 48, "call %lld", s->call);
        break;
    case TL_EXCHANGE:
        if (p->moe && s->tile >= 0 && (s->slot == 0 || s->slot == 1)) {
            const char *what = s->slot == 1 ? "combine" : "dispatch";
            snprintf(label[n++], 48, "%s chunk %lld", what, s->tile);
            snprintf(label[n++], 48, "%s %lld", what, s->tile);
            snprintf(title, tsize, "%s of chunk %lld (rank %d)", what, s->tile, s->rank);
        }
        break;
    case TL_EXPERT:
        if (s->expert >= 0) {
            snprintf(label[n++], 48, "expert %lld", s->expert);
            snprintf(label[n++], 48, "%lld", s->expert);
            if (s->tile >= 0) snprintf(title, tsize, "expert %lld (rank %d, chunk %lld)", s->expert, s->rank, s->tile);
            else snprintf(title, tsize, "expert %lld (rank %d)", s->expert, s->rank);
        } else {
            snprintf(title, tsize, "an expert (rank %d; its number is not in the trace)", s->rank);
        }
        break;
    default: break;
    }
    return n;
}

/* The spans of one rank, kind and lane, [a, b), sorted by start: each at least
 * a pixel wide alone, the narrower ones merged with their neighbours. */
static void draw_run(tl_picture *p, const tl_span *s, size_t a, size_t b)
{
    int kind = s[a].kind;
    double y, h;
    span_box(p, &s[a], &y, &h);
    const char *merged_fill = kind == TL_TILE ? "#bdbdbd" : KIND[kind].colour;
    double mx0 = 0, mx1 = -1; /* the pending merged rectangle */
    merged_experts mex = {{0}, 0, 0};
    char title[640]; /* a merged bar: MERGED_MAX numbers of up to 20 digits, and its words */
    for (size_t i = a; i <= b; i++) {
        double x0 = 0, x1 = 0;
        if (i < b) {
            if (s[i].t1 < p->from || s[i].t0 > p->to) continue;
            x0 = px_of(p, fmax(s[i].t0, p->from)), x1 = px_of(p, fmin(s[i].t1, p->to));
            if (kind == TL_SIGNAL) x1 = x0; /* an instant: merges with its neighbours, drawn a pixel wide */
            if (x1 - x0 < 1.0 && mx1 >= 0 && x0 <= mx1 + 1.0) { /* joins the pending one */
                mx1 = fmax(mx1, x1);
                if (kind == TL_EXPERT && s[i].expert >= 0) merged_add(&mex, s[i].expert);
                continue;
            }
        }
        if (mx1 >= 0) { /* the pending one ends */
            if (kind == TL_EXPERT) merged_title(&mex, s[a].rank, title, sizeof title);
            rect(p, kind, mx0, mx1, y, h, merged_fill, NULL, kind == TL_EXPERT ? title : NULL);
            mx1 = -1;
        }
        if (i == b) break;
        if (x1 - x0 < 1.0) { /* starts a merged one */
            mx0 = x0, mx1 = x1;
            mex = (merged_experts){{0}, 0, 0};
            if (kind == TL_EXPERT && s[i].expert >= 0) merged_add(&mex, s[i].expert);
            continue;
        }
        const char *fill = KIND[kind].colour, *extra = NULL;
        if (kind == TL_TILE && s[i].tile % 2) fill = "#ffca28";
        if (kind == TL_EXPERT && s[i].expert % 2) fill = "#a5d6a7";
        if (kind == TL_STALL) extra = " stroke=\"#7f0000\" stroke-width=\"0.8\"";
        if (kind == TL_EXPERT || (p->moe && kind == TL_EXCHANGE)) extra = " stroke=\"#ffffff\" stroke-width=\"0.5\"";
        char label[2][48];
        int forms = span_labels(p, &s[i], label, title, sizeof title);
        rect(p, kind, x0, x1, y, h, fill, extra, title[0] ? title : NULL);
        double fs = fmin(11.0, h * 0.9);
        for (int f = 0; f < forms && fs >= 6; f++) {
            if (x1 - x0 < (double)strlen(label[f]) * fs * 0.6 + 4) continue;
            fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" text-anchor=\"middle\"%s>", (x0 + x1) / 2,
                    y + h / 2 + fs * 0.35, fs, p->moe && kind == TL_EXCHANGE ? " fill=\"#ffffff\"" : "");
            xml_text(p->f, label[f]);
            fputs("</text>\n", p->f);
            break;
        }
    }
}

/* A red mark above each stall, so that a stalled rank stands out at any zoom (one per pixel). */
static void draw_stall_marks(tl_picture *p, const tl_span *s, size_t a, size_t b)
{
    double last = -10;
    double y = p->top + s[a].rank * p->row_h + BAND_Y[2] * p->row_h;
    for (size_t i = a; i < b; i++) {
        if (s[i].t1 < p->from || s[i].t0 > p->to) continue;
        double x = px_of(p, fmax(s[i].t0, p->from));
        p->stalls++;
        if (x - last < 3) continue;
        fprintf(p->f, "<path d=\"M%.1f %.1fl-3 -5h6z\" fill=\"#e53935\"/>\n", x, y - 0.5);
        last = x;
        p->shapes++;
    }
}

/* A tick step of 1, 2 or 5 x 10^k us giving about `want` ticks. */
static double tick_step(double span_us, int want)
{
    double raw = span_us / want, pow10 = pow(10, floor(log10(raw)));
    double m = raw / pow10;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * pow10;
}

/* The time axis below the rows; grid: only its lines across the rows, drawn under the spans. */
static void draw_axis(tl_picture *p, int grid)
{
    double y = p->top + p->ranks * p->row_h + 6;
    double step = tick_step(p->to - p->from, 10);
    if (grid) {
        for (double t = ceil(p->from / step) * step; t <= p->to + 1e-9; t += step)
            fprintf(p->f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", px_of(p, t),
                    p->top, px_of(p, t), y);
        return;
    }
    fprintf(p->f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#424242\"/>\n", p->left, y,
            p->width - 20, y);
    int ms = step >= 1000;
    for (double t = ceil(p->from / step) * step; t <= p->to + 1e-9; t += step) {
        double x = px_of(p, t);
        fprintf(p->f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#424242\"/>\n", x, y, x, y + 5);
        double v = ms ? t / 1000 : t;
        int prec = ms ? (step >= 10000 ? 0 : step >= 1000 ? 1 : 2) : (step >= 1 ? 0 : 2);
        fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%.*f</text>\n", x, y + 17,
                prec, v);
    }
    fprintf(p->f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">time (%s, from the trace's "
                  "first span)</text>\n",
            p->width - 20, y + 32, ms ? "ms" : "us");
}

/* The MoE op's spans go in the same kinds under its own words: its exchanges are the dispatch and the
 * combine of a chunk of tokens, its matmuls a chunk's experts together, its work spans each expert. */
static const char *legend_of(int k, int moe)
{
    if (moe && k == TL_EXCHANGE) return "dispatch / combine (a chunk)";
    if (moe && k == TL_MATMUL) return "a chunk's experts";
    if (moe && k == TL_CALL) return "MoE call";
    if (k == TL_EXPERT) return "expert (its number among all E; a lane per compute thread)";
    return KIND[k].legend;
}

/* About how wide text is at 11 pixels in a sans-serif font: narrow letters, wide ones, the rest. */
static double text_width_11(const char *text)
{
    double w = 0;
    for (const char *c = text; *c; c++)
        w += strchr("ilj.,:;'|", *c) ? 3.4 : strchr("tfr()/ ", *c) ? 4.5 : strchr("mwMW", *c) ? 10.0
             : *c >= 'A' && *c <= 'Z' ? 8.0 : *c >= '0' && *c <= '9' ? 7.0 : 6.6;
    return w;
}

/* The legend: the kinds drawn in the picture, and only those. */
static void draw_legend(tl_picture *p, double stall_us, int moe)
{
    double x = 10, y = 50;
    for (int k = 0; k < TL_KINDS; k++) {
        if (!p->present[k]) continue;
        char text[96];
        if (k == TL_STALL) snprintf(text, sizeof text, "stalled wait (>= %.0f us, marked)", stall_us);
        else snprintf(text, sizeof text, "%s", legend_of(k, moe));
        double w = 28 + text_width_11(text);
        if (x > 10 && x + w > p->width - 10) x = 10, y += 16;
        fprintf(p->f, "<rect class=\"legend k-%s\" x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>",
                KIND[k].name, x, y, KIND[k].colour);
        fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">", x + 16, y + 9);
        xml_text(p->f, text);
        fputs("</text>\n", p->f);
        x += w;
    }
}

static void draw_title(tl_picture *p, const json_value *meta, const char *json_path)
{
    char line[512];
    double M = json_number(json_get(meta, "M"), 0), K = json_number(json_get(meta, "K"), 0);
    double N = json_number(json_get(meta, "N"), 0);
    const char *mode = json_string(json_get(meta, "mode")), *transport = json_string(json_get(meta, "transport"));
    const char *path = json_string(json_get(meta, "path")), *sched = json_string(json_get(meta, "schedule"));
    const char *op = json_string(json_get(meta, "op")); /* traces before the reverse op have none: the seed's */
    if (M > 0)
        snprintf(line, sizeof line, "a2amm: M=%.0f K=%.0f N=%.0f R=%d, op %.40s, %s mode, %s, path %s, tile %.0f "
                 "rows, depth %.0f, transport %s",
                 M, K, N, p->ranks, op ? op : "alltoall-matmul", mode ? mode : "?", sched ? sched : "?", path ? path : "?",
                 json_number(json_get(meta, "tile_m"), 0), json_number(json_get(meta, "depth"), 0),
                 transport ? transport : "?");
    else if (op && !strcmp(op, "moe"))
        snprintf(line, sizeof line, "a2amm: MoE op T=%.0f H=%.0f I=%.0f, %.0f experts, top-%.0f, R=%d, %s mode, %s "
                 "schedule, transport %s",
                 json_number(json_get(meta, "T"), 0), json_number(json_get(meta, "H"), 0),
                 json_number(json_get(meta, "I"), 0), json_number(json_get(meta, "experts"), 0),
                 json_number(json_get(meta, "topk"), 0), p->ranks, mode ? mode : "?", sched ? sched : "?",
                 transport ? transport : "?");
    else
        snprintf(line, sizeof line, "a2amm timeline of %s (%d ranks)", json_path, p->ranks);
    fputs("<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", p->f);
    xml_text(p->f, line);
    fputs("</text>\n", p->f);
    const char *summary = json_string(json_get(meta, "summary"));
    fputs("<text x=\"10\" y=\"36\" font-size=\"12\">", p->f);
    xml_text(p->f, summary ? summary : "(precision mode: one call; perf mode's trace carries its figures here)");
    fputs("</text>\n", p->f);
}

static int draw(tl_picture *p, const json_value *meta, const char *json_path, double stall_us)
{
    fprintf(p->f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                  "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            p->width, p->height, p->width, p->height);
    draw_title(p, meta, json_path);
    draw_legend(p, stall_us, p->moe);
    int label_every = p->row_h >= 12 ? 1 : (int)ceil(12.0 / p->row_h);
    for (int r = 0; r < p->ranks; r++) {
        double y = p->top + r * p->row_h;
        if (r % 2) fprintf(p->f, "<rect x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\"/>\n", y, p->width,
                           p->row_h);
        if (r % label_every == 0)
            fprintf(p->f, "<text x=\"%d\" y=\"%.1f\" font-size=\"%.1f\" text-anchor=\"end\">rank %d</text>\n",
                    p->left - 8, y + p->row_h * 0.6, fmin(12.0, p->row_h * 0.8), r);
    }
    draw_axis(p, 1);
    qsort(p->spans, p->n, sizeof *p->spans, cmp_span);
    for (size_t a = 0, b; a < p->n; a = b) {
        for (b = a + 1; b < p->n && p->spans[b].rank == p->spans[a].rank && p->spans[b].kind == p->spans[a].kind &&
                        p->spans[b].lane == p->spans[a].lane;)
            b++;
        draw_run(p, p->spans, a, b);
        if (p->spans[a].kind == TL_STALL) draw_stall_marks(p, p->spans, a, b);
    }
    draw_axis(p, 0);
    fputs("</svg>\n", p->f);
    return ferror(p->f) ? -1 : 0;
}

/* draw's arguments, for io_write_stream. */
typedef struct svg_job {
    tl_picture *p;
    const json_value *meta;
    const char *json_path;
    double stall_us;
} svg_job;

static int draw_svg(FILE *f, void *arg)
{
    svg_job *j = arg;
    j->p->f = f;
    return draw(j->p, j->meta, j->json_path, j->stall_us);
}

/* The window: every span, or one call's (its CALL spans on every rank). */
static int choose_window(tl_picture *p, int64_t call, const char *path, a2amm_error *err)
{
    p->from = INFINITY, p->to = -INFINITY;
    for (size_t i = 0; i < p->n; i++) {
        const tl_span *s = &p->spans[i];
        if (call > 0 && !(s->kind == TL_CALL && s->call == call)) continue;
        p->from = fmin(p->from, s->t0), p->to = fmax(p->to, s->t1);
    }
    if (!isfinite(p->from))
        return a2amm_fail(err, A2AMM_E_INVAL, "%s: no call %lld in the trace", path, (long long)call);
    if (p->to <= p->from) p->to = p->from + 1;
    return A2AMM_OK;
}

int timeline_render(const char *json_path, const char *svg_path, const timeline_options *o, timeline_stats *stats,
                    a2amm_error *err)
{
    memset(stats, 0, sizeof *stats);
    char *text = NULL, why[160];
    size_t len = 0;
    int rc = read_file(json_path, &text, &len, err);
    if (rc) return rc;
    json_value root;
    if (json_parse(text, len, &root, why, sizeof why)) {
        free(text);
        return a2amm_fail(err, A2AMM_E_FORMAT, "%s: not JSON: %s", json_path, why);
    }
    free(text);
    const json_value *events = root.type == JSON_ARRAY ? &root : json_get(&root, "traceEvents");
    tl_picture p = {.width = o->width > 0 ? o->width : 1400, .left = 70, .lanes = 1};
    const char *op = json_string(json_get(json_get(&root, "otherData"), "op"));
    p.moe = op && !strcmp(op, "moe");
    if (!events || events->type != JSON_ARRAY)
        rc = a2amm_fail(err, A2AMM_E_FORMAT, "%s: no \"traceEvents\" array (a Chrome trace, as --trace writes, "
                        "has one)", json_path);
    if (!rc) rc = collect_spans(events, json_path, &p, err);
    if (!rc && p.moe) rc = assign_lanes(&p, err);
    if (!rc && p.width < 300) rc = a2amm_fail(err, A2AMM_E_INVAL, "--width must be at least 300 (got %d)", p.width);
    if (!rc) rc = choose_window(&p, o->call, json_path, err);
    double stall_us = o->stall_us > 0 ? o->stall_us : rc ? 0 : auto_stall_us(&p);
    for (size_t i = 0; !rc && i < p.n; i++) {
        tl_span *s = &p.spans[i];
        if (s->kind == TL_WAIT && s->t1 - s->t0 >= stall_us) s->kind = TL_STALL;
        if (!(s->t1 < p.from || s->t0 > p.to)) p.present[s->kind] = 1; /* what draw_run draws */
    }
    if (!rc) {
        /* the MoE op's rows: its experts' lanes at least 12 pixels high where the ranks leave room */
        double fit = 1152.0 / p.ranks, want = p.moe ? fmax(48.0, 26.0 * p.lanes) : 36;
        p.row_h = p.ranks <= 32 ? (int)fmax(36.0, fmin(want, fit)) : (int)fmax(6.0, fit);
        p.top = 92;
        p.height = p.top + p.ranks * p.row_h + 48;
        stats->ranks = p.ranks, stats->spans = p.n, stats->from_us = p.from, stats->to_us = p.to;
        stats->stall_us = stall_us;
        svg_job job = {&p, json_get(&root, "otherData"), json_path, stall_us};
        rc = io_write_stream(svg_path, draw_svg, &job, err);
        stats->shapes = p.shapes, stats->stalls = p.stalls;
    }
    free(p.spans);
    json_free(&root);
    return rc;
}

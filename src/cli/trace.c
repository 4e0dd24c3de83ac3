/* The ranks' spans, their sums and their JSON (see trace.h). */
#include "cli/trace.h"
#include "io/moe_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/json.h"
#include "common/error.h"
#include "io/io.h"
#include "op/op_kind.h"

static const char *const KIND_NAMES[TRACE_KINDS] = {"call", "barrier", "tile",     "wait",    "matmul",  "send",
                                                    "signal", "exchange", "prepare", "write", "variant", "work"};

const char *trace_kind_name(trace_kind k) { return k >= 0 && k < TRACE_KINDS ? KIND_NAMES[k] : "?"; }

int64_t trace_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the clock the library stamps its events with */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int trace_rank_init(trace_rank *t, int rank, int R, int recording, a2amm_error *err)
{
    memset(t, 0, sizeof *t);
    t->rank = rank, t->R = R, t->recording = recording;
    t->wait_from_s = calloc((size_t)R, sizeof *t->wait_from_s);
    if (!t->wait_from_s) return a2amm_fail(err, A2AMM_E_NOMEM, "trace: out of memory");
    return A2AMM_OK;
}

void trace_rank_free(trace_rank *t)
{
    free(t->recs);
    free(t->wait_from_s);
    memset(t, 0, sizeof *t);
}

static void keep(trace_rank *t, const trace_rec *r)
{
    if (!t->recording) return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 4096;
        if (cap > TRACE_MAX_RECS) cap = TRACE_MAX_RECS;
        trace_rec *p = cap > t->cap ? realloc(t->recs, cap * sizeof *p) : NULL;
        if (!p) {
            t->dropped++;
            return;
        }
        t->recs = p, t->cap = cap;
    }
    t->recs[t->n++] = *r;
}

void trace_span(trace_rank *t, trace_kind kind, int64_t t0_ns, int64_t t1_ns, int variant)
{
    trace_rec r = {.t0_ns = t0_ns, .t1_ns = t1_ns, .kind = kind, .peer = -1, .slot = -1, .variant = variant,
                   .call = -1, .tile = -1};
    if (t->counting) t->sum_s[kind] += (double)(t1_ns - t0_ns) * 1e-9;
    keep(t, &r);
}

/* The span an end event closes: its kind, and the begin event that opened it. */
static int span_of(a2amm_event_kind end, trace_kind *kind, a2amm_event_kind *begin)
{
    static const struct { a2amm_event_kind end, begin; trace_kind kind; } map[] = {
        {A2AMM_EVENT_TILE_END, A2AMM_EVENT_TILE, TRACE_TILE},
        {A2AMM_EVENT_WAIT_END, A2AMM_EVENT_WAIT_BEGIN, TRACE_WAIT},
        {A2AMM_EVENT_MATMUL_END, A2AMM_EVENT_MATMUL_BEGIN, TRACE_MATMUL},
        {A2AMM_EVENT_SEND_END, A2AMM_EVENT_SEND_BEGIN, TRACE_SEND},
        {A2AMM_EVENT_EXCHANGE_END, A2AMM_EVENT_EXCHANGE_BEGIN, TRACE_EXCHANGE},
        {A2AMM_EVENT_BARRIER_END, A2AMM_EVENT_BARRIER_BEGIN, TRACE_BARRIER},
        {A2AMM_EVENT_CALL_END, A2AMM_EVENT_CALL_BEGIN, TRACE_CALL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].end == end) {
            *kind = map[i].kind, *begin = map[i].begin;
            return 1;
        }
    return 0;
}

int trace_observe(void *arg, const a2amm_event *ev)
{
    trace_rank *t = arg;
    trace_kind kind;
    a2amm_event_kind begin;
    if (ev->kind >= 0 && ev->kind < A2AMM_EVENT_KINDS) t->open[ev->kind] = *ev;
    if (ev->kind == A2AMM_EVENT_WORK) { /* a compute thread's piece of a matmul: a span of its own track */
        trace_rec r = {.t0_ns = ev->time_ns, .t1_ns = ev->time_ns + ev->duration_ns, .kind = TRACE_WORK,
                       .peer = ev->peer, .slot = ev->slot, .variant = ev->thread, .call = (int64_t)ev->call,
                       .tile = ev->tile, .rows = ev->rows, .k = ev->k};
        keep(t, &r);
    } else if (ev->kind == A2AMM_EVENT_SIGNAL) {
        trace_rec r = {.t0_ns = ev->time_ns, .t1_ns = ev->time_ns, .kind = TRACE_SIGNAL, .peer = ev->peer,
                       .slot = ev->slot, .variant = -1, .call = (int64_t)ev->call, .tile = ev->tile,
                       .rows = ev->rows, .signal = ev->signal};
        keep(t, &r);
    } else if (span_of(ev->kind, &kind, &begin)) {
        const a2amm_event *b = &t->open[begin];
        trace_rec r = {.t0_ns = b->time_ns, .t1_ns = ev->time_ns, .kind = kind, .peer = b->peer, .slot = b->slot,
                       .variant = -1, .call = (int64_t)b->call, .tile = b->tile, .rows = b->rows, .k = b->k,
                       .bytes = ev->bytes ? ev->bytes : b->bytes, .signal = b->signal};
        if (t->counting) {
            double dt = (double)(r.t1_ns - r.t0_ns) * 1e-9;
            t->sum_s[kind] += dt;
            if (kind == TRACE_WAIT && r.peer >= 0 && r.peer < t->R) t->wait_from_s[r.peer] += dt;
            if (kind == TRACE_CALL) t->calls++;
        }
        keep(t, &r);
    }
    return t->next ? t->next(t->next_arg, ev) : A2AMM_OK;
}

/* ---- a rank's spans through a file ------------------------------------------ */

static const char TRACE_MAGIC[8] = "a2trace1";

int trace_save(const trace_rank *t, const char *path, a2amm_error *err)
{
    /* O_NOFOLLOW: the part's name beside the trace is never written through a link */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        return a2amm_fail(err, A2AMM_E_IO, "cannot write %s: %s", path, strerror(e));
    }
    uint64_t head[2] = {(uint64_t)t->n, (uint64_t)t->dropped};
    int ok = fwrite(TRACE_MAGIC, 1, sizeof TRACE_MAGIC, f) == sizeof TRACE_MAGIC && fwrite(head, sizeof head, 1, f) == 1 &&
             (t->n == 0 || fwrite(t->recs, sizeof *t->recs, t->n, f) == t->n);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        unlink(path);
        return a2amm_fail(err, A2AMM_E_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return A2AMM_OK;
}

int trace_load(const char *path, trace_rec **recs, size_t *n, size_t *dropped, a2amm_error *err)
{
    *recs = NULL, *n = 0, *dropped = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return a2amm_fail(err, A2AMM_E_IO, "cannot read %s: %s", path, strerror(errno));
    char magic[sizeof TRACE_MAGIC];
    uint64_t head[2];
    int rc = A2AMM_OK;
    if (fread(magic, 1, sizeof magic, f) != sizeof magic || memcmp(magic, TRACE_MAGIC, sizeof magic) ||
        fread(head, sizeof head, 1, f) != 1 || head[0] > TRACE_MAX_RECS)
        rc = a2amm_fail(err, A2AMM_E_FORMAT, "%s: not a rank's trace spans", path);
    if (!rc && head[0] && !(*recs = malloc((size_t)head[0] * sizeof **recs)))
        rc = a2amm_fail(err, A2AMM_E_NOMEM, "trace: out of memory for %llu spans", (unsigned long long)head[0]);
    if (!rc && head[0] && fread(*recs, sizeof **recs, (size_t)head[0], f) != head[0])
        rc = a2amm_fail(err, A2AMM_E_SIZE, "%s: shorter than its %llu spans", path, (unsigned long long)head[0]);
    fclose(f);
    if (rc) {
        free(*recs);
        *recs = NULL;
        return rc;
    }
    *n = (size_t)head[0], *dropped = (size_t)head[1];
    return A2AMM_OK;
}

/* ---- the JSON ---------------------------------------------------------------- */

/* The MoE op's track of exchanges (after any compute thread's). */
enum { MOE_EXCHANGE_TID = 1000 };

/* A MoE work span's expert by its number among all E (the event's slot is the rank's local expert). */
static int moe_expert(const trace_rec *r, const moe_io_shape *moe, int rank)
{
    return rank * (moe->E / moe->R) + r->slot;
}

/* The span's name, as a person reads it in a timeline. */
/* The MoE op's spans (a2amm_moe_set_observer's events) on rank `rank`, or 0 for a kind it does not make. */
static int moe_span_name(char *buf, size_t size, const trace_rec *r, const moe_io_shape *moe, int rank)
{
    switch ((trace_kind)r->kind) {
    case TRACE_CALL: snprintf(buf, size, "call %lld (%lld tokens)", (long long)r->call, (long long)r->rows); return 1;
    case TRACE_EXCHANGE:
        snprintf(buf, size, "%s chunk %lld", r->slot == 1 ? "combine" : "dispatch", (long long)r->tile);
        return 1;
    case TRACE_MATMUL:
        snprintf(buf, size, "experts chunk %lld (%lld rows)", (long long)r->tile, (long long)r->rows);
        return 1;
    case TRACE_WORK:
        snprintf(buf, size, "expert %d (%lld rows)", moe_expert(r, moe, rank), (long long)r->rows);
        return 1;
    default: return 0;
    }
}

static void span_name(char *buf, size_t size, const trace_rec *r, const trace_meta *m, int rank)
{
    const op_kind_row *op = m->s ? op_kind_row_of(m->s->kind) : NULL;
    const char *arrow = op ? op->matmul_arrow : "<-"; /* matmul-alltoall's matmul makes the block for its peer */
    if (m->moe && moe_span_name(buf, size, r, m->moe, rank)) return;
    switch ((trace_kind)r->kind) {
    case TRACE_CALL: snprintf(buf, size, "call %lld (m %lld)", (long long)r->call, (long long)r->rows); break;
    case TRACE_TILE: snprintf(buf, size, "tile %lld", (long long)r->tile); break;
    case TRACE_WAIT: snprintf(buf, size, "wait tile %lld <- rank %d", (long long)r->tile, r->peer); break;
    case TRACE_MATMUL:
        snprintf(buf, size, "matmul tile %lld %s rank %d", (long long)r->tile, arrow, r->peer);
        break;
    case TRACE_SEND: snprintf(buf, size, "send tile %lld -> rank %d", (long long)r->tile, r->peer); break;
    case TRACE_SIGNAL: snprintf(buf, size, "signal -> rank %d", r->peer); break;
    case TRACE_EXCHANGE: snprintf(buf, size, "alltoall (unfused)"); break;
    case TRACE_PREPARE: snprintf(buf, size, "B preparation"); break;
    case TRACE_WRITE: snprintf(buf, size, "output write"); break;
    case TRACE_WORK:
        snprintf(buf, size, "compute tile %lld %s rank %d", (long long)r->tile, arrow, r->peer);
        break;
    case TRACE_VARIANT:
        snprintf(buf, size, "perf: %s", m->variant_names && r->variant >= 0 ? m->variant_names[r->variant] : "?");
        break;
    default: snprintf(buf, size, "%s", trace_kind_name((trace_kind)r->kind)); break;
    }
}

/* The peer's key: the rank a span's rows go "to" (sends, signals), else for a matmul the op kind's word
 * (matmul-alltoall's block is made "to" its peer), else the "source" they came from. */
static const char *peer_key(const trace_rec *r, const op_kind_row *op)
{
    if (r->kind == TRACE_SEND || r->kind == TRACE_SIGNAL) return "to";
    return op && (r->kind == TRACE_MATMUL || r->kind == TRACE_WORK) ? op->matmul_peer_key : "source";
}

/* The span's details; expert >= 0: the MoE op's expert (its number among all E) that a work span ran. */
static void span_args(FILE *f, const trace_rec *r, const op_kind_row *op, int expert)
{
    fprintf(f, "\"args\":{");
    const char *sep = "";
    if (expert >= 0) fprintf(f, "\"expert\":%d", expert), sep = ",";
    if (r->call >= 0) fprintf(f, "%s\"call\":%lld", sep, (long long)r->call), sep = ",";
    if (r->tile >= 0) fprintf(f, "%s\"tile\":%lld", sep, (long long)r->tile), sep = ",";
    if (r->peer >= 0) fprintf(f, "%s\"%s\":%d", sep, peer_key(r, op), r->peer), sep = ",";
    if (r->slot >= 0) fprintf(f, "%s\"slot\":%d", sep, r->slot), sep = ",";
    if (r->kind == TRACE_TILE || r->kind == TRACE_MATMUL || r->kind == TRACE_CALL)
        fprintf(f, "%s\"rows\":%lld", sep, (long long)r->rows), sep = ",";
    if (r->k) fprintf(f, "%s\"k\":%lld", sep, (long long)r->k), sep = ",";
    if (r->bytes) fprintf(f, "%s\"bytes\":%lld", sep, (long long)r->bytes), sep = ",";
    if (r->signal) fprintf(f, "%s\"signal\":%llu", sep, (unsigned long long)r->signal);
    fputc('}', f);
}

static void write_meta(FILE *f, int R, const trace_meta *m, int64_t origin)
{
    const op_shape *s = m->s;
    if (m->moe)
        fprintf(f, "\"otherData\":{\"tool\":\"a2amm\",\"op\":\"moe\",\"T\":%lld,\"H\":%lld,\"I\":%lld,"
                "\"experts\":%d,\"topk\":%d,\"R\":%d,\"mode\":", (long long)m->moe->T, (long long)m->moe->H,
                (long long)m->moe->I, m->moe->E, m->moe->K, R);
    else
        fprintf(f, "\"otherData\":{\"tool\":\"a2amm\",\"op\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,\"R\":%d,"
                "\"mode\":", op_kind_name(s->kind), (long long)s->M, (long long)s->K, (long long)s->N, R);
    cli_json_fstr(f, m->mode);
    fprintf(f, ",\"transport\":");
    cli_json_fstr(f, m->transport);
    fprintf(f, ",\"path\":");
    cli_json_fstr(f, m->path);
    fprintf(f, ",\"schedule\":\"%s\",\"tile_m\":%lld,\"depth\":%d,\"threads\":%d",
            m->schedule ? m->schedule : m->unfused ? "unfused" : "fused",
            (long long)m->tile_m, m->depth, m->threads);
    fprintf(f, ",\"clock\":\"CLOCK_MONOTONIC of each rank, minus its offset, minus the origin\",\"origin_ns\":%lld",
            (long long)origin);
    fprintf(f, ",\"clock_offsets_ns\":[");
    for (int r = 0; r < R; r++) fprintf(f, "%s%lld", r ? "," : "", (long long)(m->offset_ns ? m->offset_ns[r] : 0));
    fprintf(f, "],\"clock_offsets_how\":\"%s\"", m->offset_ns ? "measured at start: a ping exchange with rank 0, "
                                                                 "the round trip's midpoint (the fastest of several)"
                                                               : "none: every rank reads this machine's clock");
    fprintf(f, ",\"spans_dropped\":[");
    for (int r = 0; r < R; r++) fprintf(f, "%s%zu", r ? "," : "", m->dropped ? m->dropped[r] : (size_t)0);
    fprintf(f, "]");
    if (m->summary) {
        fprintf(f, ",\"summary\":");
        cli_json_fstr(f, m->summary);
    }
    if (m->fused_s > 0)
        fprintf(f, ",\"perf\":{\"fused_median_s\":%.9f,\"matmul_alone_median_s\":%.9f,\"alltoall_alone_median_s\":%.9f}",
                m->fused_s, m->matmul_s, m->alltoall_s);
    fputc('}', f);
}

typedef struct trace_json {
    int R;
    trace_rec *const *recs;
    const size_t *n;
    const trace_meta *m;
} trace_json;

static int write_events(FILE *f, void *arg)
{
    const trace_json *j = arg;
    int R = j->R;
    trace_rec *const *recs = j->recs;
    const size_t *n = j->n;
    const trace_meta *m = j->m;
    int64_t origin = INT64_MAX;
    for (int r = 0; r < R; r++)
        for (size_t i = 0; i < n[r]; i++) {
            int64_t t = recs[r][i].t0_ns - (m->offset_ns ? m->offset_ns[r] : 0);
            if (t < origin) origin = t;
        }
    if (origin == INT64_MAX) origin = 0;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    for (int r = 0; r < R; r++) {
        fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", r, r);
        fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n", r, r);
        if (m->moe) /* the exchanges on a track of their own: the overlap schedule runs them beside the experts */
            fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
                       "\"rank %d's thread: the calls, the experts' chunks (and its share of them)\"}},\n"
                       "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
                       "\"rank %d's exchanges: the chunks' dispatch and combine\"}}",
                    r, r, r, MOE_EXCHANGE_TID, r);
        else
            fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d's "
                       "thread: waits, matmul calls (and its share of them), sends\"}}",
                    r, r);
        int64_t off = m->offset_ns ? m->offset_ns[r] : 0, received = 0;
        /* a track named for each compute thread the rank has, and any seen beyond: which thread takes
         * which piece of a matmul is first come, first served, so a busy host may leave one idle */
        int threads = m->threads > 1 ? m->threads : 1;
        for (size_t i = 0; i < n[r]; i++)
            if (recs[r][i].kind == TRACE_WORK && recs[r][i].variant + 1 > threads) threads = recs[r][i].variant + 1;
        for (int th = 1; th < threads; th++)
            fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
                       "\"rank %d's compute thread %d\"}}", r, th, r, th);
        for (size_t i = 0; i < n[r]; i++) {
            const trace_rec *s = &recs[r][i];
            int tid = s->kind == TRACE_WORK ? s->variant : m->moe && s->kind == TRACE_EXCHANGE ? MOE_EXCHANGE_TID : 0;
            char name[96];
            span_name(name, sizeof name, s, m, r);
            double ts = (double)(s->t0_ns - off - origin) / 1e3, dur = (double)(s->t1_ns - s->t0_ns) / 1e3;
            if (s->kind == TRACE_SIGNAL)
                fprintf(f, ",\n{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"signal\",\"pid\":%d,\"tid\":0,"
                           "\"ts\":%.3f,", name, r, ts);
            else
                fprintf(f, ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                           "\"dur\":%.3f,", name, trace_kind_name((trace_kind)s->kind), r, tid, ts, dur);
            span_args(f, s, m->s ? op_kind_row_of(m->s->kind) : NULL,
                      m->moe && s->kind == TRACE_WORK ? moe_expert(s, m->moe, r) : -1);
            fputc('}', f);
            if ((s->kind == TRACE_WAIT || s->kind == TRACE_EXCHANGE) && s->bytes) {
                received += s->bytes;
                fprintf(f, ",\n{\"ph\":\"C\",\"name\":\"bytes received\",\"pid\":%d,\"ts\":%.3f,"
                           "\"args\":{\"bytes\":%lld}}", r, ts + dur, (long long)received);
            }
        }
        fprintf(f, "%s\n", r + 1 < R ? "," : "");
    }
    fprintf(f, "],\n");
    write_meta(f, R, m, origin);
    fprintf(f, "}\n");
    return ferror(f) ? -1 : 0;
}

int trace_write_json(const char *path, int R, trace_rec *const *recs, const size_t *n, const trace_meta *meta,
                     a2amm_error *err)
{
    return io_write_stream(path, write_events, &(trace_json){R, recs, n, meta}, err);
}

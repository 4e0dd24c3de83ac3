/*
 * The create agreement of an op: every rank's whole shared config, compared
 * as one hash in one round of words, whatever the number of its fields.
 *
 * The words of a call have room for a dozen arguments; an op's config has
 * more fields with every kind and version. So create sends a hash of every
 * shared field (names and values, after the defaults), and a hash of the
 * field names alone (two builds of the library that describe the config
 * differently must not compare values field by field). Equal hashes: done,
 * one round as before. Different value hashes: every rank sees some rank
 * differ from it (ranks that all agreed with each other would have equal
 * hashes), so every rank takes the same extra rounds, the field values a
 * dozen at a time, and the message names the first field that differs and
 * both values, as the words of other calls do.
 */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/error.h"

enum { WORD_VALUES = API_WORD_ARGS, WORD_NAMES, WORD_FIELDS };

/* FNV-1a, 64 bits, over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Field f's value as a word (a double as its bits). */
static int64_t field_value(const void *config, const api_field *f)
{
    const char *at = (const char *)config + f->offset;
    int64_t v = 0;
    int i;
    switch (f->type) {
    case API_FIELD_I64: memcpy(&v, at, sizeof v); break;
    case API_FIELD_INT: memcpy(&i, at, sizeof i), v = i; break;
    case API_FIELD_DOUBLE: memcpy(&v, at, sizeof v); break;
    }
    return v;
}

const char *const API_FP8_NAMES[] = {"e4m3", "e5m2", NULL};
const char *const API_PATH_NAMES[] = {"direct", "put", NULL};
const char *const API_SCHEDULE_NAMES[] = {"fused", "unfused", "overlap", NULL};
const char *const API_KIND_NAMES[] = {"alltoall-matmul", "matmul-alltoall", NULL};

static void describe(const api_field *f, int64_t v, char *buf, size_t size)
{
    int known = 0;
    for (int i = 0; f->values && f->values[i]; i++) known += i == v;
    if (f->type == API_FIELD_DOUBLE) {
        double d;
        memcpy(&d, &v, sizeof d);
        snprintf(buf, size, "%g", d);
    } else if (known) {
        snprintf(buf, size, "%lld (%s)", (long long)v, f->values[v]);
    } else {
        snprintf(buf, size, "%lld", (long long)v);
    }
}

static int field_count(const api_field *fields)
{
    int n = 0;
    while (fields[n].name) n++;
    return n;
}

void api_config_words(api_call call, int64_t op_id, const void *config, const api_field *fields,
                      int64_t w[COMM_AGREE_WORDS])
{
    uint64_t values = 0xcbf29ce484222325ull, names = 0xcbf29ce484222325ull;
    for (const api_field *f = fields; f->name; f++) {
        int64_t v = field_value(config, f);
        names = fnv(names, f->name, strlen(f->name) + 1);
        values = fnv(values, f->name, strlen(f->name) + 1);
        values = fnv(values, &v, sizeof v);
    }
    memset(w, 0, COMM_AGREE_WORDS * sizeof *w);
    w[API_WORD_CALL] = call;
    w[API_WORD_OP] = op_id;
    w[WORD_VALUES] = (int64_t)values;
    w[WORD_NAMES] = (int64_t)names;
    w[WORD_FIELDS] = field_count(fields);
}

/* The extra rounds after different hashes: the first field whose values differ, as the error (every rank calls
 * this, so every rank takes the same rounds). */
static int name_difference(a2amm_comm *comm, const void *config, const api_field *fields, int64_t deadline_ns,
                           const char *call, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx), n = field_count(fields);
    for (int first = 0; first < n; first += API_MAX_ARGS) {
        int64_t w[COMM_AGREE_WORDS] = {0};
        for (int i = first; i < n && i < first + API_MAX_ARGS; i++)
            w[API_WORD_ARGS + i - first] = field_value(config, &fields[i]);
        int rc = comm_agree(ctx, w, comm->words, deadline_ns, err);
        if (rc) return rc;
        for (int p = 0; p < R; p++) {
            const int64_t *theirs = comm->words + (size_t)p * COMM_AGREE_WORDS;
            for (int i = first; p != me && i < n && i < first + API_MAX_ARGS; i++) {
                int64_t x = w[API_WORD_ARGS + i - first], y = theirs[API_WORD_ARGS + i - first];
                if (x == y) continue;
                char a[40], b[40];
                describe(&fields[i], x, a, sizeof a);
                describe(&fields[i], y, b, sizeof b);
                return a2amm_fail(err, A2AMM_E_INVAL,
                                  "%s: rank %d has %s = %s, rank %d has %s: every rank must pass the same", call, me,
                                  fields[i].name, a, p, b);
            }
        }
    }
    return a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d: the configs' hashes differ between ranks but no field does "
                      "(a hash collision: report it)", call, me);
}

int api_agree_config(a2amm_comm *comm, api_call call, int64_t op_id, const void *config, const api_field *fields,
                     double timeout_s, const char *name, size_t *top, a2amm_error *err)
{
    comm_ctx *ctx = comm->ctx;
    int me = comm_rank(ctx), R = comm_nranks(ctx);
    int64_t w[COMM_AGREE_WORDS];
    api_config_words(call, op_id, config, fields, w);
    /* One round: the call and op compared as every call's are (a difference fails every rank there). */
    int rc = api_agree(comm, w, timeout_s, name, top, err);
    if (rc) return rc;
    int values_differ = 0;
    for (int p = 0; p < R; p++) {
        const int64_t *theirs = comm->words + (size_t)p * COMM_AGREE_WORDS;
        if (p == me) continue;
        if (theirs[WORD_NAMES] != w[WORD_NAMES] || theirs[WORD_FIELDS] != w[WORD_FIELDS])
            return api_fail_all(ctx, a2amm_fail(err, A2AMM_E_INVAL, "%s: rank %d's library describes the config "
                                                "with other fields than rank %d's (%lld and %lld fields): every rank "
                                                "must run the same a2amm", name, me, p,
                                                (long long)w[WORD_FIELDS], (long long)theirs[WORD_FIELDS]), err);
        values_differ |= theirs[WORD_VALUES] != w[WORD_VALUES];
    }
    if (!values_differ) return A2AMM_OK;
    rc = name_difference(comm, config, fields, comm_deadline_after(timeout_s), name, err);
    return api_fail_all(ctx, rc, err);
}

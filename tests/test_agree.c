/*
 * The creates' agreement over the whole config (api/config_agree.c: a hash
 * of every shared field, then the fields themselves when the hashes differ),
 * three ranks under a2amm_launch:
 *  - every shared field of a2amm_op_config and a2amm_moe_config, changed on
 *    rank 2 alone: every rank's create fails, naming that field and both
 *    values (ranks 0 and 1 agree with each other: they must still take the
 *    extra rounds rank 2 takes, or it would wait to the deadline);
 *  - two fields changed on two ranks: every rank names a field;
 *  - the same config, and one whose threads (each rank's own) differ: made.
 * The fields are listed here, apart from the library's table, so a field
 * the table forgets is caught.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "a2amm.h"
#include "check.h"

enum { R = 3 };

typedef struct rank_report {
    int rc;
    char msg[1100];
} rank_report;

static rank_report *rep; /* [R], shared with the ranks */

/* One case: which op, which field to change (NULL: none), on which ranks (a bit each), and a second field on
 * rank 1 (NULL: none). */
typedef struct agree_case {
    int moe;
    const char *field, *field_on_1;
    unsigned ranks;
} agree_case;

static const char *const OP_FIELDS[] = {"max_m", "k", "n", "a_type", "b_type", "tile_m", "depth", "path",
                                        "schedule", "timeout_s", "kind", "threads", NULL};
static const char *const MOE_FIELDS[] = {"experts", "topk", "hidden", "inter", "max_tokens", "max_recv", "a_type",
                                         "b_type", "timeout_s", "schedule", "threads", NULL};

/* Changes the named field of c to another valid value; returns the value before and after as text. */
static void change_op(a2amm_op_config *c, const char *f, char *was, char *now)
{
#define CHANGE(name, fmt, cast, to)                                                                   \
    if (!strcmp(f, #name)) {                                                                          \
        sprintf(was, fmt, (cast)c->name), c->name = to, sprintf(now, fmt, (cast)c->name);             \
        return;                                                                                       \
    }
    CHANGE(max_m, "%lld", long long, 9)
    CHANGE(k, "%lld", long long, 288)
    CHANGE(n, "%lld", long long, 48)
    CHANGE(a_type, "%d", int, A2AMM_E5M2)
    CHANGE(b_type, "%d", int, A2AMM_E5M2)
    CHANGE(tile_m, "%lld", long long, 2)
    CHANGE(depth, "%d", int, 3)
    CHANGE(path, "%d", int, A2AMM_PATH_PUT)
    CHANGE(schedule, "%d", int, A2AMM_SCHEDULE_UNFUSED)
    CHANGE(timeout_s, "%g", double, 40)
    CHANGE(kind, "%d", int, A2AMM_OP_MATMUL_ALLTOALL)
    CHANGE(threads, "%d", int, 2)
}

static void change_moe(a2amm_moe_config *c, const char *f, char *was, char *now)
{
    CHANGE(experts, "%d", int, 9)
    CHANGE(topk, "%d", int, 3)
    CHANGE(hidden, "%lld", long long, 96)
    CHANGE(inter, "%lld", long long, 96)
    CHANGE(max_tokens, "%lld", long long, 9)
    CHANGE(max_recv, "%lld", long long, 10)
    CHANGE(a_type, "%d", int, A2AMM_E5M2)
    CHANGE(b_type, "%d", int, A2AMM_E5M2)
    CHANGE(timeout_s, "%g", double, 40)
    CHANGE(schedule, "%d", int, A2AMM_SCHEDULE_UNFUSED)
    CHANGE(threads, "%d", int, 2)
#undef CHANGE
}

static a2amm_op_config op_config(void)
{
    a2amm_op_config c = A2AMM_OP_CONFIG_INIT;
    c.max_m = 8, c.k = 192, c.n = 24, c.tile_m = 4, c.depth = 2, c.threads = 1, c.timeout_s = 30;
    return c;
}

static a2amm_moe_config moe_config(void)
{
    a2amm_moe_config c = A2AMM_MOE_CONFIG_INIT;
    c.experts = 6, c.topk = 2, c.hidden = 64, c.inter = 64, c.max_tokens = 8, c.threads = 1, c.timeout_s = 30;
    return c;
}

static int rank_create(a2amm_comm *comm, void *arg)
{
    const agree_case *k = arg;
    int me = a2amm_comm_rank(comm);
    char was[40], now[40];
    a2amm_error err = {0, ""};
    int rc;
    if (k->moe) {
        a2amm_moe_config c = moe_config();
        if (k->field && (k->ranks >> me & 1)) change_moe(&c, k->field, was, now);
        if (k->field_on_1 && me == 1) change_moe(&c, k->field_on_1, was, now);
        a2amm_moe *m = NULL;
        rc = a2amm_moe_create(comm, &c, &m, &err);
        a2amm_moe_destroy(m);
    } else {
        a2amm_op_config c = op_config();
        if (k->field && (k->ranks >> me & 1)) change_op(&c, k->field, was, now);
        if (k->field_on_1 && me == 1) change_op(&c, k->field_on_1, was, now);
        a2amm_op *op = NULL;
        rc = a2amm_op_create(comm, &c, &op, &err);
        a2amm_op_destroy(op);
    }
    rep[me].rc = rc;
    snprintf(rep[me].msg, sizeof rep[me].msg, "%s", rc ? err.msg : "");
    return A2AMM_OK;
}

static int launch(const agree_case *k)
{
    memset(rep, 0, R * sizeof *rep);
    a2amm_error err = {0, ""};
    int rc = a2amm_launch(R, rank_create, (void *)k,
                          &(a2amm_launch_options){.size = sizeof(a2amm_launch_options), .heap_bytes = 16u << 20,
                                                  .timeout_s = 120},
                          &err);
    return rc;
}

/* The name the message gives the changed value of an enum field (a2amm.h's), or NULL for a number. */
static const char *value_name(const char *field)
{
    if (!strcmp(field, "a_type") || !strcmp(field, "b_type")) return "(e5m2)";
    if (!strcmp(field, "path")) return "(put)";
    if (!strcmp(field, "schedule")) return "(unfused)";
    if (!strcmp(field, "kind")) return "(matmul-alltoall)";
    return NULL;
}

static void test_each_field(int moe)
{
    const char *const *fields = moe ? MOE_FIELDS : OP_FIELDS;
    const char *op = moe ? "a2amm_moe_create" : "a2amm_op_create";
    for (int i = 0; fields[i]; i++) {
        agree_case k = {moe, fields[i], NULL, 1u << 2};
        char was[40], now[40], text[80];
        if (moe) {
            a2amm_moe_config c = moe_config();
            change_moe(&c, fields[i], was, now);
        } else {
            a2amm_op_config c = op_config();
            change_op(&c, fields[i], was, now);
        }
        int launched = launch(&k); /* a2amm_launch reports the failed communicator: the ranks' own say what */
        int own = !strcmp(fields[i], "threads"); /* each rank's own: no difference to report */
        for (int r = 0; r < R; r++) {
            if (own) {
                CHECK(launched == A2AMM_OK, "%s, threads differ: the launch", op);
                CHECK(rep[r].rc == A2AMM_OK, "%s, threads differ: rank %d makes the op (got %d: %s)", op, r, rep[r].rc,
                      rep[r].msg);
                continue;
            }
            snprintf(text, sizeof text, "%s = ", fields[i]);
            CHECK(rep[r].rc == A2AMM_E_INVAL && strstr(rep[r].msg, op) && strstr(rep[r].msg, text) &&
                      strstr(rep[r].msg, was) && strstr(rep[r].msg, now),
                  "%s, %s %s on rank 2, %s elsewhere: rank %d names the field and both values (got %d: %s)", op,
                  fields[i], now, was, r, rep[r].rc, rep[r].msg);
            const char *named = value_name(fields[i]);
            if (named)
                CHECK(strstr(rep[r].msg, named), "%s, %s differs: rank %d names the enum's values, %s (got: %s)", op,
                      fields[i], r, named, rep[r].msg);
        }
    }
}

static void test_two_fields(int moe)
{
    agree_case k = {moe, moe ? "inter" : "depth", moe ? "topk" : "max_m", 1u << 2};
    launch(&k);
    for (int r = 0; r < R; r++)
        CHECK(rep[r].rc == A2AMM_E_INVAL && strstr(rep[r].msg, "every rank must pass the same"),
              "%s: two fields differ on ranks 1 and 2: rank %d fails naming one (got %d: %s)", moe ? "moe" : "op", r,
              rep[r].rc, rep[r].msg);
}

static void test_same(int moe)
{
    agree_case k = {moe, NULL, NULL, 0};
    CHECK(launch(&k) == A2AMM_OK, "the same config: the launch");
    for (int r = 0; r < R; r++)
        CHECK(rep[r].rc == A2AMM_OK, "%s, the same config: rank %d makes it (got %d: %s)", moe ? "moe" : "op", r,
              rep[r].rc, rep[r].msg);
}

int main(void)
{
    rep = mmap(NULL, R * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rep == MAP_FAILED) return 1;
    for (int moe = 0; moe <= 1; moe++) {
        test_same(moe);
        test_each_field(moe);
        test_two_fields(moe);
    }
    return check_summary("test_agree");
}

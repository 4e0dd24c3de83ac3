/* How a rank's end is told (rank_report.h). */
#include "cli/rank_report.h"

#include <stdio.h>
#include <string.h>

#include "cli/json.h"
#include "io/io.h"

int rank_report_fail(a2amm_comm *comm, int me, int rc, const a2amm_error *err)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "rank %d: ", me);
    const char *msg = err->msg[0] ? err->msg : a2amm_strerror(rc);
    if (!strncmp(msg, prefix, (size_t)n)) msg += n;
    if (rc != A2AMM_E_PEER) a2amm_comm_fail(comm, rc, msg);
    return rc;
}

void rank_report_print(int r, const a2amm_rank_report *k)
{
    if (!k->started) printf("  [Rank %d] never started (the launcher stopped before forking it)\n", r);
    else if (k->status == 0) printf("  [Rank %d] ok\n", r);
    else if (k->signal && k->killed_by_launcher)
        printf("  [Rank %d] killed by the launcher (it did not stop after the failure) while: %s\n", r, k->doing);
    else if (k->signal)
        printf("  [Rank %d] FAILED: killed by signal %d (%s) while: %s\n", r, k->signal, strsignal(k->signal),
               k->doing);
    else if (k->failed_first && k->status == A2AMM_E_PEER)
        printf("  [Rank %d] FAILED: exited with code %d before finishing, while: %s\n", r, k->exit_code, k->doing);
    else if (k->failed_first) printf("  [Rank %d] FAILED (%s) while: %s\n", r, a2amm_strerror(k->status), k->doing);
    else if (k->status == A2AMM_E_PEER) printf("  [Rank %d] stopped: another rank failed (it was: %s)\n", r, k->doing);
    else printf("  [Rank %d] FAILED (%s) while: %s\n", r, a2amm_strerror(k->status), k->doing);
}

const char *rank_report_word(const a2amm_rank_report *k)
{
    if (!k->started) return "never started";
    if (k->status == 0) return "ok";
    if (k->killed_by_launcher) return "killed by the launcher";
    if (k->failed_first) return "failed";
    return k->status == A2AMM_E_PEER && !k->signal ? "stopped: another rank failed" : "failed";
}

void rank_report_json_tail(const a2amm_rank_report *ranks, int R, const char *dir, int failed)
{
    printf(",\"ranks\":[");
    for (int r = 0; ranks && r < R; r++) {
        const a2amm_rank_report *k = &ranks[r];
        printf("%s{\"rank\":%d", r ? "," : "", r);
        cli_json_key_str("status", rank_report_word(k));
        cli_json_key_str("doing", k->status ? k->doing : NULL);
        printf(",\"signal\":%d}", k->signal);
    }
    printf("],\"outputs\":[");
    for (int r = 0; !failed && r < R; r++) {
        char path[IO_PATH_MAX];
        if (io_rank_path(path, sizeof path, dir, "output", r, "npu_out.bin", NULL)) continue;
        printf("%s", r ? "," : "");
        cli_json_str(path);
    }
    printf("]}\n");
}

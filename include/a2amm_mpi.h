/*
 * a2amm over Open MPI: a communicator made from an MPI communicator, for
 * ranks on several machines. Link liba2amm_mpi.a with liba2amm.a and MPI
 * (the core library never links MPI).
 *
 * The op runs over it as over the shared-memory transport, on the put path
 * (a rank cannot read another machine's memory: the direct path is refused):
 * each rank posts the receives of a tile's rows into its ring slots ahead of
 * time, senders send fp8 codes and E8M0 scales straight from their A, tile
 * by tile, the next tiles in flight while the current one is multiplied;
 * the waiting rank drives MPI's progress between matmul calls. Two-sided
 * calls only (no one-sided MPI: over TCP it has no asynchronous progress).
 *
 * Failures are returned, as on shared memory: the library never prints and
 * never calls MPI_Abort. A rank whose call fails (a wrong argument, a
 * timeout, an observer's stop) returns its status and fails the
 * communicator: it sends every other rank a notice, and their calls return
 * A2AMM_E_PEER within moments, naming it (a2amm_comm_status gives the
 * first failure's message). What happens next is the caller's: after a
 * failure the communicator is done (destroy it); a peer may be left inside
 * a collective that the failed rank never joined, which MPI cannot cancel,
 * so a program that cannot go on calls MPI_Abort itself (the a2amm command
 * prints the message and does). A rank that dies is reported by mpirun,
 * which ends the others; one that leaves (a2amm_comm_destroy) while others
 * still wait for it in a collective call tells them: their calls return
 * A2AMM_E_PEER within 0.2 s (a grace for a call the leaver did complete),
 * naming it. a2amm_comm_destroy waits up to 5 s for the other ranks' own
 * destroys, so that nothing of the communicator is left in flight. Every
 * wait ends at the op's timeout_s.
 */
#ifndef A2AMM_MPI_H
#define A2AMM_MPI_H

#include <mpi.h>

#include "a2amm.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over mpi_comm (MPI initialized, any thread level: only the
 * calling thread calls MPI, so over MPI every call on the communicator and
 * its ops, a2amm_comm_fail and a2amm_comm_status included, is made from
 * one thread). heap_bytes: this rank's memory for the ops made on the
 * communicator (0: 1 GiB, reserved, not touched until used). Free it with
 * a2amm_comm_destroy before MPI_Finalize.
 */
A2AMM_API int a2amm_mpi_comm_create(MPI_Comm mpi_comm, size_t heap_bytes, a2amm_comm **comm, a2amm_error *err);

#ifdef __cplusplus
}
#endif
#endif

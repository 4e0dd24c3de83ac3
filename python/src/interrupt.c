/*
 * Ctrl-C during a blocking call (see ext.h). Python's own SIGINT handler only
 * sets a flag that the interpreter looks at between bytecodes, which a call
 * running in C with the GIL released never reaches. So during the call a
 * handler of ours sets ext_interrupted, which the op's observer answers at
 * its next tile with A2AMM_E_INTERRUPTED (the op's documented stop path),
 * and posts a semaphore that wakes a thread of ours, which fails the call's
 * communicator: a wait for the other ranks (which looks at no observer) ends
 * too, and the other ranks' calls end with PeerError. A handler may do
 * neither of those itself (they are not async-signal-safe); sem_post is.
 */
#include "ext.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t ext_interrupted;

static unsigned long main_ident;
static sem_t wake;
static pid_t stopper_pid; /* the process whose stopper thread runs (none after a fork until the next call) */
static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static a2amm_comm *current; /* the communicator of the call in progress, under current_lock */

int guard_main_thread(void) { return PyThread_get_thread_ident() == main_ident; }

void guard_after_fork_child(void)
{
    main_ident = PyThread_get_thread_ident();
    /* the parent's stopper thread is not in this process; the lock may have been held by it */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    current_lock = fresh;
    current = NULL;
    stopper_pid = 0;
    ext_interrupted = 0;
    sem_init(&wake, 0, 0);
}

static void on_sigint(int sig)
{
    (void)sig;
    ext_interrupted = 1;
    int e = errno;
    sem_post(&wake);
    errno = e;
}

static void *stopper(void *arg)
{
    (void)arg;
    for (;;) {
        while (sem_wait(&wake) != 0 && errno == EINTR) {}
        pthread_mutex_lock(&current_lock);
        if (current && ext_interrupted) lib_comm_fail(current, A2AMM_E_INTERRUPTED, "interrupted (SIGINT, Ctrl-C)");
        pthread_mutex_unlock(&current_lock);
    }
    return NULL;
}

/* The stopper thread of this process, started at its first guarded call. */
static int stopper_running(void)
{
    if (stopper_pid == getpid()) return 1;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* it never takes a signal: the calling thread does */
    int ok = pthread_create(&t, &attr, stopper, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (ok) stopper_pid = getpid();
    return ok;
}

void guard_enter(call_guard *g, a2amm_comm *comm)
{
    g->installed = 0;
    if (!guard_main_thread()) return; /* signals are the main thread's: Python's own flag works there */
    if (comm && !stopper_running()) comm = NULL;
    pthread_mutex_lock(&current_lock);
    current = comm;
    pthread_mutex_unlock(&current_lock);
    ext_interrupted = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, &g->old) != 0) return; /* one call: ours in, the old one out */
    g->installed = 1;
    if (g->old.sa_handler == SIG_IGN) guard_leave(g); /* ignored stays ignored */
}

int guard_leave(call_guard *g)
{
    if (!g->installed) return 0;
    sigaction(SIGINT, &g->old, NULL);
    g->installed = 0;
    pthread_mutex_lock(&current_lock);
    current = NULL;
    pthread_mutex_unlock(&current_lock);
    if (!ext_interrupted) return 0;
    ext_interrupted = 0;
    /* the signal goes to Python's handler now: KeyboardInterrupt, or the program's own handler */
#if PY_VERSION_HEX >= 0x030A0000
    PyErr_SetInterruptEx(SIGINT);
#else
    PyErr_SetInterrupt();
#endif
    return PyErr_CheckSignals();
}

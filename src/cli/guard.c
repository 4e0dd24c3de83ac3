/* The guard of a writing command (see guard.h). */
#include "cli/guard.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

static _Noreturn void guard_main(int fd, void (*clean)(void *arg), void *arg)
{
    setpgid(0, 0); /* its launcher does the same, so that it holds before anything is written */
    prctl(PR_SET_NAME, "a2amm-guard");
    /* what it may say goes to the command's stderr: never stopped by a terminal, nor killed by a closed pipe */
    signal(SIGTTOU, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN); /* the command's Ctrl-C is the command's to handle */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) dup2(null, STDIN_FILENO), dup2(null, STDOUT_FILENO); /* never a reader's stdout held open */
    char c;
    ssize_t n;
    while ((n = read(fd, &c, 1)) != 0)
        if (n < 0 && errno != EINTR) _exit(1);
    clean(arg); /* the end of the pipe: the command and every rank are gone */
    _exit(0);
}

int cli_guard_start(cli_guard *g, void (*clean)(void *arg), void *arg, a2amm_error *err)
{
    int fds[2];
    g->pid = 0;
    g->fd = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return a2amm_fail(err, A2AMM_E_SYS, "cannot make the guard's pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        guard_main(fds[0], clean, arg);
    }
    int e = errno;
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return a2amm_fail(err, A2AMM_E_SYS, "cannot fork the guard process that cleans up after a kill: %s",
                          strerror(e));
    }
    setpgid(pid, pid);
    g->pid = (int)pid;
    g->fd = fds[1];
    return A2AMM_OK;
}

void cli_guard_stop(cli_guard *g)
{
    if (g->pid <= 0) return;
    kill(g->pid, SIGKILL); /* before the pipe closes: it must not clean what the command finished */
    struct timespec start, now, pause = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) { /* it dies at once; 10 s rules out waiting forever on a process stuck in the kernel */
        pid_t got = waitpid(g->pid, NULL, WNOHANG);
        if (got == g->pid || (got < 0 && errno != EINTR)) break;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 10) break;
        nanosleep(&pause, NULL);
    }
    close(g->fd);
    g->pid = 0;
    g->fd = -1;
}

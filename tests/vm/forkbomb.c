/* Every process forks as fast as it can. The first process reports and
 * exits 1 once its fork has failed 200 times; any other sleeps (holding
 * its slot) at its first failed fork. Each failed fork costs the kernel
 * most of a fork (the pids controller refuses late, after the memory is
 * copied), so only the first process retries: 30 forkers each retrying
 * 200 times under an emulated CPU could outlast the run's deadline.
 * Without a pids limit it runs until the machine runs out of memory. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    pid_t top = getpid();
    long made = 0, failed = 0;
    int last = 0;
    for (;;) {
        pid_t p = fork();
        if (p == 0)
            continue; /* the child forks too */
        if (p > 0) {
            made++;
            continue;
        }
        last = errno;
        if (getpid() != top || ++failed >= 200)
            break;
    }
    if (getpid() == top) {
        printf("fork refused %ld times (%s) after %ld children\n", failed, strerror(last), made);
        fflush(stdout);
        return 1;
    }
    for (;;)
        pause();
}

/* Every process forks as fast as it can. A process whose fork fails 200
 * times sleeps (holding its slot); the first one then reports and exits 1.
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
        if (++failed >= 200)
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

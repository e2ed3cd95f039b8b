#define _GNU_SOURCE
/* A flood of orphans: start CHAINS processes that each keep forking a child
 * and exiting (every step leaves an orphan for the jail's init to reap),
 * until TOTAL forks were made in all or SECONDS have passed.
 *
 * Usage: orphan_flood CHAINS TOTAL SECONDS wait|leave [MARKER]
 *   wait:  the payload waits until every chain has ended, prints
 *          "forks=N" and "ended" (the moment the last forker is gone), then
 *          exits 0.
 *   leave: the payload prints "started" and exits 0 at once; the forkers
 *          keep going until the jail kills them.
 * MARKER only tags the command line, so a test can find survivors. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct shared {
    atomic_long forks;
    atomic_long live;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void chain(struct shared *s, long total, double end) {
    /* Hold no pipe of the caller's open: a survivor must not look like a
     * slow run to whoever waits for the end of the output. */
    close(0);
    close(1);
    close(2);
    for (;;) {
        if (atomic_load(&s->forks) >= total || now() >= end) {
            atomic_fetch_sub(&s->live, 1);
            _exit(0);
        }
        pid_t p = fork();
        if (p < 0) {
            /* EAGAIN (a process limit): try again, the orphans are reaped. */
            sched_yield();
            continue;
        }
        if (p > 0)
            _exit(0); /* the child carries on, orphaned */
        atomic_fetch_add(&s->forks, 1);
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: orphan_flood CHAINS TOTAL SECONDS wait|leave [MARKER]\n");
        return 2;
    }
    int chains = atoi(argv[1]);
    long total = atol(argv[2]);
    double end = now() + atof(argv[3]);
    int wait = strcmp(argv[4], "wait") == 0;
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    atomic_store(&s->forks, 0);
    atomic_store(&s->live, chains);
    for (int i = 0; i < chains; i++) {
        pid_t p = fork();
        if (p < 0) {
            perror("fork");
            return 1;
        }
        if (p == 0)
            chain(s, total, end);
    }
    if (!wait) {
        printf("started\n");
        fflush(stdout);
        return 0;
    }
    while (atomic_load(&s->live) > 0) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    printf("forks=%ld\nended\n", atomic_load(&s->forks));
    fflush(stdout);
    return 0;
}

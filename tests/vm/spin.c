/* Burn argv[1] seconds (default 1) of this process's own CPU time, then
 * print "spin cpu_ms=C wall_ms=W" on stderr: the CPU it used and the wall
 * time that took, both measured here, so the jail's start-up and a loaded
 * host cannot move the ratio toward the quota's side. Under a quota of half
 * a CPU, C/W stays at or below about 0.5 however busy the host is; without
 * one, on an idle machine, it is about 1. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double secs(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double want = argc > 1 ? atof(argv[1]) : 1.0;
    double w0 = secs(CLOCK_MONOTONIC), c0 = secs(CLOCK_PROCESS_CPUTIME_ID);
    volatile unsigned long x = 0;
    while (secs(CLOCK_PROCESS_CPUTIME_ID) - c0 < want)
        for (int i = 0; i < 100000; i++)
            x += i;
    double c = secs(CLOCK_PROCESS_CPUTIME_ID) - c0, w = secs(CLOCK_MONOTONIC) - w0;
    fprintf(stderr, "spin cpu_ms=%ld wall_ms=%ld\n", (long)(c * 1000), (long)(w * 1000));
    return 0;
}

/* Burn CPU until argv[1] seconds (default 2) of wall-clock time have passed. */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 100000; i++)
            x += i;
        clock_gettime(CLOCK_MONOTONIC, &b);
        if ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9 >= secs)
            return 0;
    }
}

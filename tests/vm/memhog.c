/* Allocate and touch memory 1 MiB at a time, up to argv[1] MiB (default 256).
 * Prints "survived N MiB" if it got them all: under a lower memory limit it
 * must be killed before that line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long want = argc > 1 ? atol(argv[1]) : 256;
    for (long i = 0; i < want; i++) {
        char *p = malloc(1 << 20);
        if (!p) {
            printf("malloc failed at %ld MiB\n", i);
            return 3;
        }
        memset(p, (int)(i & 0xff) | 1, 1 << 20);
    }
    printf("survived %ld MiB\n", want);
    return 0;
}

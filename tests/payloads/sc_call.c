/* Call raw syscalls given on argv as NAME=NR (all six arguments 0) and
 * print one line per call: "NAME rc=R errno=E". With -k, print
 * "calling NAME" first and "survived NAME" after (kill-mode tests). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv) {
    int kill_mode = 0;
    int i = 1;
    if (i < argc && strcmp(argv[i], "-k") == 0) {
        kill_mode = 1;
        i++;
    }
    for (; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "bad argument %s\n", argv[i]);
            return 2;
        }
        *eq = 0;
        long nr = strtol(eq + 1, NULL, 0);
        if (kill_mode) {
            printf("calling %s\n", argv[i]);
            fflush(stdout);
        }
        errno = 0;
        long rc = syscall(nr, 0L, 0L, 0L, 0L, 0L, 0L);
        int e = errno;
        if (kill_mode)
            printf("survived %s\n", argv[i]);
        printf("%s rc=%ld errno=%d\n", argv[i], rc, e);
        fflush(stdout);
    }
    return 0;
}

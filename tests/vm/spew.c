/* Write argv[1] MiB (default 64) of text to stdout. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 64;
    static char line[4096];
    memset(line, 'x', sizeof line);
    line[sizeof line - 1] = '\n';
    for (long i = 0; i < mib * 256; i++) {
        const char *p = line;
        size_t left = sizeof line;
        while (left > 0) {
            ssize_t n = write(1, p, left);
            if (n < 0)
                return 1;
            p += n;
            left -= (size_t)n;
        }
    }
    return 0;
}

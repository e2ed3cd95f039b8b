/* Run a command with at most 1024 open files (soft and hard), as systemd
 * gives a service by default. Usage: nofile_1024 CMD [ARGS...] */
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: nofile_1024 CMD [ARGS...]\n");
        return 2;
    }
    struct rlimit r = {.rlim_cur = 1024, .rlim_max = 1024};
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
        perror("setrlimit(RLIMIT_NOFILE)");
        return 125;
    }
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}

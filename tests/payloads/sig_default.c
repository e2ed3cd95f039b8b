/* Run a command with the default disposition for SIGHUP, SIGINT, SIGQUIT
 * and SIGTERM, and no signal blocked, whatever the caller had: a test that
 * sends those signals must not depend on how the test run was started (a
 * shell's background job ignores SIGINT and SIGQUIT; nohup, SIGHUP).
 * Usage: sig_default CMD [ARGS...] */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sig_default CMD [ARGS...]\n");
        return 2;
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}

#define _GNU_SOURCE
/* Run a command as uid 65534 in a mount namespace of its own where
 * /proc/sys is read-only, as many container runtimes mount it. Must be
 * started by root. Usage: ro_procsys CMD [ARGS...] */
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ro_procsys CMD [ARGS...]\n");
        return 2;
    }
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("/proc/sys", "/proc/sys", NULL, MS_BIND | MS_REC, NULL) != 0 ||
        mount(NULL, "/proc/sys", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) != 0) {
        perror("ro_procsys: a read-only /proc/sys");
        return 126;
    }
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
        perror("ro_procsys: become 65534");
        return 126;
    }
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}

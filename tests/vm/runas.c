#define _GNU_SOURCE
/* runas UID GID CMD ARGS...: drop to UID/GID (no supplementary groups) and exec. */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: runas UID GID CMD ARGS...\n");
        return 2;
    }
    uid_t uid = (uid_t)atol(argv[1]);
    gid_t gid = (gid_t)atol(argv[2]);
    if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid)) {
        perror("runas");
        return 2;
    }
    execvp(argv[3], argv + 3);
    perror(argv[3]);
    return 127;
}

#define _GNU_SOURCE
/* Run a command without CAP_SYS_ADMIN, as root in a default Docker
 * container is: dropped from the bounding and inheritable sets, so a root
 * program it executes cannot get it back (mount(2) fails with EPERM).
 * Started unprivileged there is nothing to drop. Usage: fb_nosysadmin CMD [ARGS...] */
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fb_nosysadmin CMD [ARGS...]\n");
        return 2;
    }
    if (geteuid() == 0) {
        if (prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0) {
            perror("prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN)");
            return 126;
        }
        struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
        struct __user_cap_data_struct d[2];
        if (syscall(SYS_capget, &h, d) != 0) {
            perror("capget");
            return 126;
        }
        d[CAP_SYS_ADMIN / 32].inheritable &= ~(1u << (CAP_SYS_ADMIN % 32));
        if (syscall(SYS_capset, &h, d) != 0) {
            perror("capset");
            return 126;
        }
    }
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}

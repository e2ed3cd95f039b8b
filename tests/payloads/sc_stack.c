/* Stack two filters that both answer getppid with SECCOMP_RET_ERRNO, with
 * different errnos (first EAGAIN, then EINVAL), and print which errno the
 * kernel returns: for equal actions the filter installed last wins. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static int add(int err) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | err),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog p = { sizeof f / sizeof f[0], f };
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p);
}

int main(void) {
    if (add(EAGAIN) != 0 || add(EINVAL) != 0) {
        printf("install failed errno=%d\n", errno);
        return 1;
    }
    errno = 0;
    long rc = syscall(SYS_getppid);
    printf("getppid rc=%ld errno=%d\n", rc, rc < 0 ? errno : 0);
    return 0;
}

#define _GNU_SOURCE
/* Run a command as a plain `docker run` would, as far as the fallback's
 * connect mediation can tell: Docker's default seccomp profile refuses
 * unshare(2) and clone(2) with namespace flags (EPERM; clone3(2): ENOSYS),
 * and, without CAP_SYS_PTRACE, pidfd_getfd, process_vm_readv/writev, ptrace
 * and kcmp (EPERM); and the container's root has no CAP_SYS_PTRACE, which
 * this drops (bounding, effective, permitted, inheritable, ambient) when
 * run as root. Usage: chk_noptrace CMD [ARGS...] */
#include <errno.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NS_FLAGS (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | \
                  CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)

static int drop_ptrace(void) {
    if (prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0) {
        perror("prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE)");
        return -1;
    }
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) {
        perror("capget");
        return -1;
    }
    /* CAP_SYS_PTRACE is 19: in the first word. */
    d[0].effective &= ~(1u << CAP_SYS_PTRACE);
    d[0].permitted &= ~(1u << CAP_SYS_PTRACE);
    d[0].inheritable &= ~(1u << CAP_SYS_PTRACE);
    if (syscall(SYS_capset, &h, d) != 0) {
        perror("capset");
        return -1;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
        perror("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: chk_noptrace CMD [ARGS...]\n");
        return 2;
    }
    if (geteuid() == 0 && drop_ptrace() != 0)
        return 126;
    struct sock_filter f[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 10, 0),
        /* 2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 9, 0),
        /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 8, 0),
        /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_writev, 7, 0),
        /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ptrace, 6, 0),
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_kcmp, 5, 0),
        /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 5, 0),
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 2),
        /* 9: clone's flags are its first argument (low 32 bits). */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        /* 10 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NS_FLAGS, 1, 0),
        /* 11 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 12 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        /* 13 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("prctl(PR_SET_NO_NEW_PRIVS)");
        return 126;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("prctl(PR_SET_SECCOMP)");
        return 126;
    }
    execv(argv[1], argv + 1);
    perror("execv");
    return 127;
}

/* Test harness, not a payload: run PROG as if the kernel had Landlock ABI N.
 *
 *   ll_fake_abi N PROG ARGS...
 *
 * N = 0: landlock_create_ruleset, landlock_add_rule and landlock_restrict_self
 *        fail with ENOSYS (a kernel built without Landlock).
 * N > 0: the ABI version query (landlock_create_ruleset(NULL, 0,
 *        LANDLOCK_CREATE_RULESET_VERSION)) answers N; every other Landlock
 *        call reaches the real kernel. A library that honours the version it
 *        is told (as a program on an ABI-N kernel must) asks only for ABI-N
 *        features, and the real kernel enforces exactly those.
 *
 * The child installs a seccomp filter (inherited by PROG and everything it
 * starts) and hands the user-notification fd to this process, which answers
 * the version queries until no task uses the filter any more.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NR_CREATE 444
#define NR_ADD 445
#define NR_RESTRICT 446

static void die(const char *what) {
    perror(what);
    exit(120);
}

static int install(int abi) {
    struct sock_filter enosys[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_CREATE, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_ADD, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_RESTRICT, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    };
    struct sock_filter notify[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_CREATE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* args[2], low 32 bits (little endian): the flags */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1 /* VERSION */, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
    };
    struct sock_fprog prog;
    if (abi == 0) {
        prog.len = sizeof(enosys) / sizeof(enosys[0]);
        prog.filter = enosys;
    } else {
        prog.len = sizeof(notify) / sizeof(notify[0]);
        prog.filter = notify;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("prctl(NO_NEW_PRIVS)");
    long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                     abi == 0 ? 0 : SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (r < 0) die("seccomp(SET_MODE_FILTER)");
    return (int)r;
}

static void send_fd(int sock, int fd) {
    char byte = 'f';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof(u));
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(sock, &m, 0) != 1) die("sendmsg");
}

static int recv_fd(int sock) {
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof(u.buf)};
    if (recvmsg(sock, &m, 0) != 1) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static int status_code(int st) {
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 120;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ll_fake_abi N PROG ARGS...\n");
        return 120;
    }
    int abi = atoi(argv[1]);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) die("socketpair");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(sp[0]);
        int listener = install(abi);
        if (abi != 0) {
            send_fd(sp[1], listener);
            close(listener);
        }
        close(sp[1]);
        execvp(argv[2], argv + 2);
        die("execvp");
    }
    close(sp[1]);
    int st;
    if (abi == 0) {
        if (waitpid(child, &st, 0) != child) die("waitpid");
        return status_code(st);
    }
    int listener = recv_fd(sp[0]);
    close(sp[0]);
    if (listener < 0) {
        if (waitpid(child, &st, 0) != child) die("waitpid");
        return status_code(st) ? status_code(st) : 120;
    }
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) die("GET_NOTIF_SIZES");
    struct seccomp_notif *req = calloc(1, sizes.seccomp_notif);
    struct seccomp_notif_resp *resp = calloc(1, sizes.seccomp_notif_resp);
    if (!req || !resp) die("calloc");
    for (;;) {
        struct pollfd p = {.fd = listener, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR) continue;
            die("poll");
        }
        if (p.revents & POLLIN) {
            memset(req, 0, sizes.seccomp_notif);
            if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) continue;
            memset(resp, 0, sizes.seccomp_notif_resp);
            resp->id = req->id;
            resp->val = abi;
            resp->error = 0;
            /* ENOENT: the caller was killed meanwhile; nothing to do. */
            (void)ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
            continue;
        }
        if (p.revents & (POLLHUP | POLLERR)) break;
    }
    if (waitpid(child, &st, 0) != child) die("waitpid");
    return status_code(st);
}

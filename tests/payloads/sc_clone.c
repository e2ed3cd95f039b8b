/* clone with a namespace flag, plain fork, raw clone3, and a pthread (glibc
 * tries clone3 first and falls back to clone on ENOSYS). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static void *thread_main(void *arg) {
    return (void *)((long)arg + 1);
}

static void try_clone(const char *name, unsigned long flags) {
    errno = 0;
    long rc = syscall(SYS_clone, flags | SIGCHLD, 0L, 0L, 0L, 0L);
    if (rc == 0)
        _exit(0);
    printf("%s rc=%s errno=%d\n", name, rc > 0 ? "child" : "-1", rc < 0 ? errno : 0);
    if (rc > 0)
        waitpid(rc, NULL, 0);
}

int main(void) {
    try_clone("clone_newuser", CLONE_NEWUSER);
    try_clone("clone_newns", CLONE_NEWNS);
    try_clone("clone_newpid", CLONE_NEWPID);
    try_clone("clone_newnet", CLONE_NEWNET);
    try_clone("clone_newuts", CLONE_NEWUTS);
    try_clone("clone_newipc", CLONE_NEWIPC);
    try_clone("clone_newcgroup", CLONE_NEWCGROUP);

    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int st = 0;
    waitpid(pid, &st, 0);
    printf("fork pid=%s status=%d\n", pid > 0 ? "ok" : "fail", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

    struct { unsigned long long v[11]; } args;
    memset(&args, 0, sizeof args);
    args.v[4] = SIGCHLD; /* exit_signal */
    errno = 0;
    long rc = syscall(SYS_clone3, &args, sizeof args);
    if (rc == 0)
        _exit(0);
    printf("clone3 rc=%ld errno=%d\n", rc, rc < 0 ? errno : 0);

    pthread_t t;
    void *ret = NULL;
    int e = pthread_create(&t, NULL, thread_main, (void *)41L);
    if (e == 0)
        pthread_join(t, &ret);
    printf("pthread_create=%d result=%ld\n", e, (long)ret);
    return 0;
}

/* TIOCSTI / TIOCLINUX on stdin, with the command's high 32 bits clear and
 * set (the kernel truncates the command to 32 bits), then an ordinary ioctl
 * (FIONREAD on a pipe) that must work. One line each: "NAME rc=R errno=E". */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

static void call(const char *name, unsigned long cmd, int fd, void *arg) {
    errno = 0;
    long rc = syscall(SYS_ioctl, (long)fd, cmd, arg);
    printf("%s rc=%ld errno=%d\n", name, rc, rc < 0 ? errno : 0);
    fflush(stdout);
}

int main(void) {
    char c = 'x';
    call("TIOCSTI", TIOCSTI, 0, &c);
    call("TIOCSTI_HIGH", TIOCSTI | (1UL << 32), 0, &c);
    call("TIOCSTI_HIGH2", TIOCSTI | 0xffffffff00000000UL, 0, &c);
    call("TIOCLINUX", TIOCLINUX, 0, &c);
    call("TIOCLINUX_HIGH", TIOCLINUX | (1UL << 32), 0, &c);
    int p[2];
    if (pipe(p) != 0)
        return 3;
    if (write(p[1], "abc", 3) != 3)
        return 3;
    int n = -1;
    call("FIONREAD", FIONREAD, p[0], &n);
    printf("FIONREAD value=%d\n", n);
    return 0;
}

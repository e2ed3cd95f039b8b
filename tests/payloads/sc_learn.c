/* Two syscalls outside @default: acct(NULL) and personality(ADDR_NO_RANDOMIZE).
 * Prints their results, then "done". */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/personality.h>
#include <sys/syscall.h>

int main(void) {
    errno = 0;
    long rc = syscall(SYS_acct, 0L);
    printf("acct rc=%ld errno=%d\n", rc, rc < 0 ? errno : 0);
    errno = 0;
    rc = syscall(SYS_personality, 0x0040000L);
    printf("personality rc=%ld errno=%d\n", rc, rc < 0 ? errno : 0);
    rc = syscall(SYS_personality, 0xffffffffL);
    printf("query=%#lx\n", rc);
    printf("done\n");
    return 0;
}

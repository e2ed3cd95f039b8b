/* Enter the kernel through a foreign ABI: "x32" (getpid with the x32 bit)
 * or "int80" (the i386 entry, getpid = 20). Prints "calling", then
 * "survived rc=R" if the process lives. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    printf("calling %s\n", argv[1]);
    fflush(stdout);
    long rc;
    if (strcmp(argv[1], "x32") == 0) {
        long nr = 0x40000000L | 39; /* __X32_SYSCALL_BIT | getpid */
        __asm__ volatile("syscall" : "=a"(rc) : "a"(nr) : "rcx", "r11", "memory");
    } else if (strcmp(argv[1], "int80") == 0) {
        long nr = 20; /* i386 getpid */
        __asm__ volatile("int $0x80" : "=a"(rc) : "a"(nr) : "memory");
    } else {
        return 2;
    }
    printf("survived rc=%ld\n", rc);
    return 0;
}

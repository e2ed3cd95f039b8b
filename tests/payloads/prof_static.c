/* For the minimal profile: report which host paths exist in the jail. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

static const char *probe(const char *p) {
    struct stat st;
    if (lstat(p, &st) == 0) return "ok";
    return errno == ENOENT ? "ENOENT" : "error";
}

int main(void) {
    printf("usr:%s bin:%s lib:%s sh:%s passwd:%s\n", probe("/usr"), probe("/bin"),
           probe("/lib"), probe("/bin/sh"), probe("/etc/passwd"));
    return 0;
}

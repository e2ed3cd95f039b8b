/* socket() by family and type: "NAME rc=ok|-1 errno=E" per attempt. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <linux/netlink.h>

static void try(const char *name, int fam, int type, int proto) {
    errno = 0;
    int fd = socket(fam, type, proto);
    printf("%s rc=%s errno=%d\n", name, fd >= 0 ? "ok" : "-1", fd >= 0 ? 0 : errno);
    if (fd >= 0)
        close(fd);
}

int main(void) {
    try("netlink_dgram", AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE);
    try("netlink_raw", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    try("packet_raw", AF_PACKET, SOCK_RAW, 0);
    try("packet_dgram", AF_PACKET, SOCK_DGRAM, 0);
    try("inet_raw", AF_INET, SOCK_RAW, IPPROTO_ICMP);
    try("inet6_raw", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
    try("unix_stream", AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    try("unix_dgram", AF_UNIX, SOCK_DGRAM, 0);
    try("inet_stream", AF_INET, SOCK_STREAM, 0);
    try("inet_dgram", AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    try("inet6_stream", AF_INET6, SOCK_STREAM, 0);
    int sv[2];
    errno = 0;
    int r = socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    printf("socketpair_unix rc=%s errno=%d\n", r == 0 ? "ok" : "-1", r == 0 ? 0 : errno);
    return 0;
}

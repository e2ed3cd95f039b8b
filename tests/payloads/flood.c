/* A hostile payload that floods the supervisor with refusals, then says
 * how many it made. Static: needs nothing from the jail.
 *
 *   flood open DIR FILES N      open DIR/fK (K = i % FILES) N times
 *                               (FILES 0: DIR itself, N times)
 *   flood sys N THREADS         THREADS threads, N acct(NULL) calls in all
 *   flood connect PORT N        N HTTP CONNECTs to the egress proxy on
 *                               127.0.0.1:PORT, each to refused.invalid
 *                               on a port of its own (1..N)
 *   flood tcp N                 N direct TCP connects to 127.0.0.1, to
 *                               ports 1..1000 in turn (refused by Landlock)
 *
 * Prints `refused=R of=N` (R: the attempts that failed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static long per_thread;
static long failed[1024];

static void *sys_loop(void *arg) {
	long t = (long)arg;
	for (long i = 0; i < per_thread; i++)
		if (syscall(SYS_acct, NULL) < 0)
			failed[t]++;
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 2)
		return 2;
	long n = 0, refused = 0;
	if (!strcmp(argv[1], "open") && argc == 5) {
		long files = atol(argv[3]);
		n = atol(argv[4]);
		char path[4096];
		for (long i = 0; i < n; i++) {
			if (files > 0)
				snprintf(path, sizeof path, "%s/f%ld", argv[2], i % files);
			else
				snprintf(path, sizeof path, "%s", argv[2]);
			int fd = open(path, O_RDONLY);
			if (fd < 0)
				refused++;
			else
				close(fd);
		}
	} else if (!strcmp(argv[1], "sys") && argc == 4) {
		n = atol(argv[2]);
		long threads = atol(argv[3]);
		if (threads < 1 || threads > 1024 || n % threads)
			return 2;
		per_thread = n / threads;
		pthread_t th[1024];
		for (long t = 0; t < threads; t++)
			if (pthread_create(&th[t], NULL, sys_loop, (void *)t))
				return 3;
		for (long t = 0; t < threads; t++) {
			pthread_join(th[t], NULL);
			refused += failed[t];
		}
	} else if (!strcmp(argv[1], "connect") && argc == 4) {
		int port = atoi(argv[2]);
		n = atol(argv[3]);
		for (long i = 0; i < n; i++) {
			int s = socket(AF_INET, SOCK_STREAM, 0);
			struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
			a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
				return 4;
			char req[128];
			int len = snprintf(req, sizeof req,
					   "CONNECT refused.invalid:%ld HTTP/1.1\r\nHost: refused.invalid\r\n\r\n",
					   i % 65535 + 1);
			if (write(s, req, len) != len)
				return 5;
			char resp[64] = {0};
			ssize_t r = read(s, resp, sizeof resp - 1);
			if (r < 12 || strncmp(resp + 9, "200", 3))
				refused++;
			close(s);
		}
	} else if (!strcmp(argv[1], "tcp") && argc == 3) {
		n = atol(argv[2]);
		for (long i = 0; i < n; i++) {
			int s = socket(AF_INET, SOCK_STREAM, 0);
			if (s < 0)
				return 4;
			struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(i % 1000 + 1)};
			a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			if (connect(s, (struct sockaddr *)&a, sizeof a) < 0 && errno == EACCES)
				refused++;
			close(s);
		}
	} else {
		return 2;
	}
	printf("refused=%ld of=%ld\n", refused, n);
	return 0;
}

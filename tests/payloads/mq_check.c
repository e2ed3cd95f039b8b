/* POSIX message queues, as a program uses them. Usage:
 *   mq_check roundtrip NAME  make NAME (exclusive), send, read the
 *                            attributes, receive, close, unlink, then
 *                            check it is gone; prints "roundtrip ok"
 *   mq_check hold NAME       make NAME, print "made", wait for EOF on
 *                            stdin, unlink it; prints "unlinked"
 *   mq_check probe NAME      open NAME without O_CREAT; prints "present"
 *                            or "absent" (ENOENT)
 *   mq_check unlink NAME     unlink NAME; prints "unlinked"
 *   mq_check fill PREFIX     make queues PREFIX0, PREFIX1, … of one small
 *                            message until mq_open fails; prints
 *                            "queues N errno E", unlinks them
 * Any other failure prints "FAIL <step>: errno E (<text>)" and exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *step)
{
	int e = errno;
	printf("FAIL %s: errno %d (%s)\n", step, e, strerror(e));
	return 1;
}

static int roundtrip(const char *name)
{
	struct mq_attr a = {.mq_maxmsg = 4, .mq_msgsize = 64};
	mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &a);
	if (q == (mqd_t)-1)
		return fail("mq_open");
	if (mq_send(q, "ping", 4, 3) != 0)
		return fail("mq_send");
	struct mq_attr got;
	if (mq_getattr(q, &got) != 0)
		return fail("mq_getattr");
	if (got.mq_curmsgs != 1 || got.mq_msgsize != 64) {
		printf("FAIL attributes: %ld messages of %ld bytes\n", got.mq_curmsgs,
		       got.mq_msgsize);
		return 1;
	}
	char buf[64];
	unsigned prio = 0;
	ssize_t n = mq_receive(q, buf, sizeof buf, &prio);
	if (n < 0)
		return fail("mq_receive");
	if (n != 4 || memcmp(buf, "ping", 4) != 0 || prio != 3) {
		printf("FAIL received %zd bytes, priority %u\n", n, prio);
		return 1;
	}
	if (mq_close(q) != 0)
		return fail("mq_close");
	if (mq_unlink(name) != 0)
		return fail("mq_unlink");
	if (mq_open(name, O_RDWR) != (mqd_t)-1 || errno != ENOENT)
		return fail("gone after unlink");
	printf("roundtrip ok\n");
	return 0;
}

static int hold(const char *name)
{
	mqd_t q = mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, NULL);
	if (q == (mqd_t)-1)
		return fail("mq_open");
	printf("made\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	if (mq_unlink(name) != 0)
		return fail("mq_unlink");
	printf("unlinked\n");
	return 0;
}

static int probe(const char *name)
{
	mqd_t q = mq_open(name, O_RDONLY);
	if (q != (mqd_t)-1) {
		printf("present\n");
		return 0;
	}
	if (errno == ENOENT) {
		printf("absent\n");
		return 0;
	}
	return fail("mq_open");
}

static int fill(const char *prefix)
{
	struct mq_attr a = {.mq_maxmsg = 1, .mq_msgsize = 16};
	char name[64];
	int n = 0, e = 0;
	for (; n < 4096; n++) {
		snprintf(name, sizeof name, "%s%d", prefix, n);
		if (mq_open(name, O_CREAT | O_EXCL | O_RDWR, 0600, &a) == (mqd_t)-1) {
			e = errno;
			break;
		}
	}
	printf("queues %d errno %d\n", n, e);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s%d", prefix, i);
		mq_unlink(name);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: mq_check roundtrip|hold|probe|unlink|fill NAME\n");
		return 2;
	}
	const char *mode = argv[1], *name = argv[2];
	if (!strcmp(mode, "roundtrip"))
		return roundtrip(name);
	if (!strcmp(mode, "hold"))
		return hold(name);
	if (!strcmp(mode, "probe"))
		return probe(name);
	if (!strcmp(mode, "unlink")) {
		if (mq_unlink(name) != 0)
			return fail("mq_unlink");
		printf("unlinked\n");
		return 0;
	}
	if (!strcmp(mode, "fill"))
		return fill(name);
	fprintf(stderr, "mq_check: unknown mode %s\n", mode);
	return 2;
}

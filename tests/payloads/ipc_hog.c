/* Hold as much memory as possible outside the address space, where
 * RLIMIT_AS does not see it: SysV shm segments of 1 MiB (each filled, then
 * detached, so it stays allocated), SysV message queues filled with
 * messages, POSIX message queues as large as they can be made, and the
 * IPC limits raised first (as the namespace's root may). Prints what it
 * holds, one line each: "shm N", "msg N", "mq N" (bytes), "raised K"
 * (how many sysctl writes succeeded), then exits 0. */
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>

static int raise_limit(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return 0;
	int ok = fputs(value, f) >= 0;
	return fclose(f) == 0 && ok;
}

int main(void)
{
	int raised = 0;
	raised += raise_limit("/proc/sys/kernel/shmall", "1000000000");
	raised += raise_limit("/proc/sys/kernel/shmmax", "100000000000");
	raised += raise_limit("/proc/sys/kernel/shmmni", "4096");
	raised += raise_limit("/proc/sys/kernel/msgmni", "32000");
	raised += raise_limit("/proc/sys/kernel/msgmnb", "1000000");
	raised += raise_limit("/proc/sys/fs/mqueue/queues_max", "1024");

	long long shm = 0;
	for (int i = 0; i < 4096; i++) {
		int id = shmget(IPC_PRIVATE, 1 << 20, IPC_CREAT | 0600);
		if (id < 0)
			break;
		char *p = shmat(id, NULL, 0);
		if (p == (void *)-1)
			break;
		memset(p, 1, 1 << 20);
		shmdt(p);
		shm += 1 << 20;
	}

	long long msg = 0;
	static struct {
		long type;
		char text[8192];
	} m = {1, {0}};
	for (int q = 0; q < 64; q++) {
		int id = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
		if (id < 0)
			break;
		while (msgsnd(id, &m, sizeof m.text, IPC_NOWAIT) == 0)
			msg += sizeof m.text;
		while (msgsnd(id, &m, 1, IPC_NOWAIT) == 0)
			msg += 1;
	}

	long long mq = 0;
	for (int q = 0; q < 64; q++) {
		char name[32];
		snprintf(name, sizeof name, "/hog%d", q);
		struct mq_attr a = {.mq_maxmsg = 10, .mq_msgsize = 8192};
		mqd_t d = mq_open(name, O_CREAT | O_RDWR | O_NONBLOCK, 0600, &a);
		if (d == (mqd_t)-1) {
			a.mq_maxmsg = 1;
			a.mq_msgsize = 1024;
			d = mq_open(name, O_CREAT | O_RDWR | O_NONBLOCK, 0600, &a);
			if (d == (mqd_t)-1)
				break;
		}
		char buf[8192];
		memset(buf, 2, sizeof buf);
		while (mq_send(d, buf, a.mq_msgsize, 0) == 0)
			mq += a.mq_msgsize;
	}
	printf("shm %lld\nmsg %lld\nmq %lld\nraised %d\n", shm, msg, mq, raised);
	return 0;
}

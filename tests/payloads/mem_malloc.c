/* One large malloc, then memset: under RLIMIT_AS malloc returns NULL and
 * memset faults (SIGSEGV); under a memory controller the pages are
 * charged as memset touches them. Either way the memory limit was hit. */
#include <stdlib.h>
#include <string.h>

int main(void)
{
	size_t n = (size_t)1 << 30;
	char *p = malloc(n);
	memset(p, 1, n);
	/* The memory is used: the compiler may not drop the pair. */
	__asm__ volatile("" : : "r"(p) : "memory");
	return 0;
}

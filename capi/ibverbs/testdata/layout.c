// TestABILayout's program: compiled against the system's
// <infiniband/verbs.h> (Debian's libibverbs-dev, the header Debian's
// binaries were built from), it compares the layout of every structure
// in layout.h with the one the library under test was compiled with, and
// checks the context the library gives a program as the header's inline
// functions read it. Usage: layout LIBRARY.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct srd_layout_entry {
	const char *name;
	size_t value;
};

#define SRD_LAYOUT_SIZE(t) {"sizeof(" #t ")", sizeof(t)},
#define SRD_LAYOUT_FIELD(t, f) {"offsetof(" #t ", " #f ")", offsetof(t, f)},
static const struct srd_layout_entry want[] = {
#include "../layout.h"
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: layout LIBRARY\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	const struct srd_layout_entry *(*layout)(size_t *) = (const struct srd_layout_entry *(*)(size_t *))dlvsym(lib, "softrdma_abi_layout", "SOFTRDMA_PRIVATE");
	if (!layout) {
		fprintf(stderr, "dlvsym softrdma_abi_layout: %s\n", dlerror());
		return 1;
	}
	size_t n;
	const struct srd_layout_entry *got = layout(&n);
	size_t nwant = sizeof(want) / sizeof(want[0]);
	int bad = 0;
	if (n != nwant) {
		printf("MISMATCH: the library records %zu entries, the header %zu\n", n, nwant);
		bad = 1;
	}
	for (size_t i = 0; i < n && i < nwant; i++) {
		if (strcmp(got[i].name, want[i].name) || got[i].value != want[i].value) {
			printf("MISMATCH: library %s = %zu, header %s = %zu\n", got[i].name, got[i].value, want[i].name,
			       want[i].value);
			bad = 1;
		}
	}
	if (bad)
		return 1;
	printf("layout: %zu sizes and offsets match\n", nwant);
	return 0;
}

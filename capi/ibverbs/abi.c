//go:build capi

// The layout the library was compiled with: the size of each structure
// and the offset of each member layout.h lists, exported under a private
// symbol version for TestABILayout, which compares it with the header
// the test's own program is compiled with.
#include <stddef.h>
#include "srdcm.h"

struct srd_layout_entry {
	const char *name;
	size_t value;
};

#define SRD_LAYOUT_SIZE(t) {"sizeof(" #t ")", sizeof(t)},
#define SRD_LAYOUT_FIELD(t, f) {"offsetof(" #t ", " #f ")", offsetof(t, f)},
static const struct srd_layout_entry srd_layout[] = {
#include "layout.h"
};

__attribute__((visibility("default"))) const struct srd_layout_entry *softrdma_abi_layout(size_t *n)
{
	*n = sizeof(srd_layout) / sizeof(srd_layout[0]);
	return srd_layout;
}

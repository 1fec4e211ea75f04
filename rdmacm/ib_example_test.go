package rdmacm_test

import (
	"fmt"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/wire"
)

// On an InfiniBand port a peer is addressed by its port GID, written as an
// IPv6 address: the subnet prefix and the port GUID.
func ExampleGIDAddr() {
	g := wire.GID{0xfe, 0x80, 8: 0x00, 9: 0x02, 10: 0xc9, 11: 0x03, 12: 0x00, 13: 0xbb, 14: 0x00, 15: 0x02}
	fmt.Println(rdmacm.GIDAddr(g))
	// Output:
	// fe80::2:c903:bb:2
}

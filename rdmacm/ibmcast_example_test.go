package rdmacm_test

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/rdmacm"
)

// The MGIDs rdma_cm joins on an InfiniBand port in the default partition:
// the IPoIB mapping of the group address with rdma_cm's signature, or an
// SA-assigned MGID as it is.
func ExampleIBMcastGID() {
	for _, g := range []string{"239.1.2.3", "ff0e::1:2345", "ff12:a01b:ffff::1"} {
		mgid := rdmacm.IBMcastGID(netip.MustParseAddr(g), 0xFFFF)
		fmt.Printf("%-18s %v\n", g, netip.AddrFrom16(mgid))
	}
	// Output:
	// 239.1.2.3          ff12:4001:ffff::ef01:203
	// ff0e::1:2345       ff12:6001:ffff::1:2345
	// ff12:a01b:ffff::1  ff12:a01b:ffff::1
}

package cm_test

import (
	"fmt"

	"github.com/softrdma/softrdma/cm"
)

// A path on an InfiniBand port, as the SA's PathRecord gives it, becomes
// the address vector both QPs of the connection use: addressed by LID,
// with the SLID's bits below the port's LMC as source path bits, and no
// GRH unless the path leaves the subnet.
func ExamplePath_AHAttr() {
	p := cm.Path{SLID: 0x13, DLID: 0x21, SL: 2, Rate: 3, HopLimit: 0}
	a := p.AHAttr(2) // the port's LMC is 2: LIDs 0x10..0x13
	fmt.Printf("IB: %v, DLID %#x, SL %d, path bits %d, GRH %v\n", p.IsIB(), a.DLID, a.SL, a.SrcPathBits, a.IsGlobal)
	// Output:
	// IB: true, DLID 0x21, SL 2, path bits 3, GRH false
}

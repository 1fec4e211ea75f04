package verbs_test

import (
	"errors"
	"fmt"
	"log"
	"net/netip"

	"github.com/softrdma/softrdma/link/loop"
	"github.com/softrdma/softrdma/verbs"
)

// Growing a CQ and shrinking it again; a depth out of range is refused.
func ExampleCQ_Resize() {
	network := loop.NewNetwork(loop.Config{})
	defer network.Close()
	l, err := network.Attach([]netip.Addr{netip.MustParseAddr("10.0.0.1")}, 4791)
	if err != nil {
		log.Fatal(err)
	}
	dev, err := verbs.Open(l, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(4, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cq.Destroy()
	if err := cq.Resize(64); err != nil {
		log.Fatal(err)
	}
	fmt.Println("grown:", cq.Cap())
	if err := cq.Resize(2); err != nil {
		log.Fatal(err)
	}
	fmt.Println("shrunk:", cq.Cap())
	fmt.Println("zero refused:", errors.Is(cq.Resize(0), verbs.ErrInvalid))
	// Output:
	// grown: 64
	// shrunk: 2
	// zero refused: true
}

package roce_test

import (
	"fmt"
	"log"
	"net/netip"

	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/verbs"
)

// A device on one address, UDP port 4791, path MTU 4096: its GID table is
// the address, as an IPv4-mapped GID.
func ExampleOpen() {
	dev, err := roce.Open([]netip.Addr{netip.MustParseAddr("127.0.0.1")},
		&roce.Options{Options: verbs.Options{MTU: verbs.MTU4096}})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	gid, _ := dev.QueryGID(1, 0)
	fmt.Println(dev.Name(), gid)
}

// A device on every address of an interface, in the GID order of Linux
// rxe, whose port follows the interface up and down (on Linux).
func ExampleOpenInterface() {
	dev, err := roce.OpenInterface("eth0", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	attr, _ := dev.QueryPort(1)
	fmt.Println(dev.Name(), attr.State, attr.GIDTableLen)
}

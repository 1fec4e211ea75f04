package remote_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/remote"
	"github.com/softrdma/softrdma/link/ib"
)

// A fabric of one switch and two CAs served on loopback; a client attaches
// CA "HcaB"'s port as a process on another host would, and gets the
// port's attributes: INIT until an SM brings the subnet up. link/ib's New
// over the port gives a softrdma device its InfiniBand port.
func ExampleDial() {
	topo, err := fabric.ParseTopology(strings.NewReader(`Switch 4 "Sw1"
[1] "HcaA"[1]
[2] "HcaB"[1]

Hca 1 "HcaA"
[1] "Sw1"[1]

Hca 1 "HcaB"
[1] "Sw1"[2]
`), "example")
	if err != nil {
		log.Fatal(err)
	}
	f, err := fabric.New(topo, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	quiet := slog.New(slog.DiscardHandler)
	srv, err := remote.NewServer(f, remote.Config{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	defer func() { cancel(); <-served }()

	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	port, err := remote.Dial(dctx, srv.Addr().String(), "HcaB", 1)
	if err != nil {
		log.Fatal(err)
	}
	a := port.Attr()
	fmt.Printf("port GUID %#x, state %d (INIT), MTU %d\n", a.PortGUID, a.State, a.MTU)

	l, err := ib.New(port) // the link a verbs.Device opens on
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("link up:", l.Up())
	l.Close()
	// Output:
	// port GUID 0x100003, state 2 (INIT), MTU 4096
	// link up: false
}

package ibsim_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/fabric/ibsim"
)

// A fabric served to ibsim's clients, and a Go client that attaches at a
// CA and asks what libumad2sim asks when a program starts.
func Example() {
	const net = "Switch 4 \"Sw1\"\n[1] \"HcaA\"[1]\n[2] \"HcaB\"[1]\n\n" +
		"Hca 1 \"HcaA\"\n[1] \"Sw1\"[1]\n\nHca 1 \"HcaB\"\n[1] \"Sw1\"[2]\n"
	topo, err := fabric.ParseTopology(strings.NewReader(net), "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	f, err := fabric.New(topo, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := ibsim.NewServer(ibsim.FabricBackend(f), ibsim.Config{SockName: "softrdma-example", Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- srv.Serve(ctx) }()

	// What ibsim-run does for a program started with SIM_HOST=HcaB.
	c, err := ibsim.Dial(ctx, ibsim.ClientConfig{SockName: "softrdma-example", Node: "HcaB"})
	if err != nil {
		fmt.Println(err)
		srv.Close()
		return
	}
	ni, _ := c.Ctl(ctx, ibsim.CtlGetNodeInfo, nil)
	pi, _ := c.Ctl(ctx, ibsim.CtlGetPortInfo, []byte{0})
	fmt.Printf("client %d at %s: node type %d, GUID %#x, port %d\n",
		c.Slot(), c.NodeName(), ni[2], binary.BigEndian.Uint64(ni[12:]), pi[28])
	c.Close()
	cancel()
	fmt.Println("Serve:", <-done)
	// Output:
	// client 0 at HcaB: node type 1, GUID 0x100002, port 1
	// Serve: <nil>
}

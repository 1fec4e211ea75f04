//go:build linux

// Command agent is the guest side of interop/peer. It is built statically
// (CGO_ENABLED=0) into the guest's initramfs, where busybox init runs it
// twice:
//
//	agent setup   once at boot: mounts, kernel modules, eth0 addresses and MTU,
//	              the rxe0 device; writes the boot status
//	agent serve   kept alive by init: answers requests from the host on TCP
//	              port 7777 (see interop/peer/internal/proto)
//
// Settings come from the kernel command line: srdma.ip4=ADDR/LEN,
// srdma.ip6=ADDR/LEN and srdma.mtu=BYTES.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: agent setup|serve")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "setup":
		err = setup()
	case "serve":
		err = serve()
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "srdma-agent:", err)
		os.Exit(1)
	}
}

// Package peer boots a real Linux Soft-RoCE peer for interoperability
// tests: a QEMU guest running the Debian kernel's rdma_rxe and rdma-core's
// tools (ibverbs-utils, rdmacm-utils, perftest), attached by a tap device to
// a network namespace that the host side of a test uses.
//
//	host: netns NAME, tap  198.18.0.1/24  fd00:198:18::1/64
//	guest: eth0, rxe0      198.18.0.2/24  fd00:198:18::2/64
//
// The guest's rxe0 GID table is 0 link-local, 1 ::ffff:198.18.0.2,
// 2 fd00:198:18::2 (so -g 1 is IPv4 and -g 2 IPv6). Commands run in the guest
// through the project's agent (interop/peer/agent), which reports exit
// status and output, bounds them with timeouts and kills whole process
// groups. Everything here needs root (namespaces, taps, setns).
//
// The package is Linux-only (network namespaces, taps, KVM/TCG through
// QEMU); on other systems it is empty.
package peer

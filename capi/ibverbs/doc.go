// Command ibverbs is softrdma's libibverbs.so.1: built with
// -buildmode=c-shared, it lets unmodified programs linked against
// rdma-core's libibverbs (ibv_devinfo, ibv_rc_pingpong, ...) run on
// softrdma devices, selected per process with LD_LIBRARY_PATH, with no
// kernel module and no root:
//
//	capi/build.sh /tmp/softrdma
//	LD_LIBRARY_PATH=/tmp/softrdma SOFTRDMA_DEVICES=127.0.0.1 ibv_devinfo -v
//
// capi/build.sh runs go build -tags capi -buildmode=c-shared with the
// linker version script; it needs cgo, gcc and Debian's libibverbs-dev
// (the header). Without the capi tag the package builds to a placeholder
// command, so that go build ./... needs neither.
//
// The devices come from the environment:
//
//   - SOFTRDMA_DEVICES lists devices, separated by spaces or semicolons.
//     Each is a network interface (eth0 or softrdma_eth0: the device
//     softrdma_eth0, whose GID table holds the interface's addresses in
//     Linux rxe's order) or comma-separated IP addresses, as the tools'
//     --bind takes them (the devices softrdma0, softrdma1, ... in order).
//     NAME=SPEC names a device NAME. Unset or empty, every interface that
//     is up with addresses is a device, as softrdma devinfo lists them.
//   - SOFTRDMA_ROCE_PORT is the UDP port (default 4791), as --roce-port.
//   - SOFTRDMA_LOG is the level of the devices' logs on standard error
//     (debug, info, warn: the default, error).
//
// Opening a device binds nothing: ibv_devinfo describes a device while
// another process uses it, as softrdma devinfo does. The UDP sockets are
// bound when the program first needs the device's data path (a
// protection domain, a CQ or a completion channel), and shared by every
// context of the process on that device.
//
// The C layer (ibverbs.c, srd.h) includes Debian's <infiniband/verbs.h>
// itself, so every structure a program sees is the header's; the linker
// version script (libibverbs.map) gives each function the symbol version
// Debian's libibverbs gives it. docs/DESIGN.md, "The C ABI library",
// describes the design and what is not supported.
package main

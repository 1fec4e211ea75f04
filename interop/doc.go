// Package interop holds softrdma's interoperability suite against Linux
// Soft-RoCE (rdma_rxe). The tests carry the build tag "interop" and need
// root:
//
//	go test -tags interop ./interop/...
//
// They boot a guest with interop/peer, run rdma-core's and perftest's tools
// in it against the softrdma command on the host side of the link, and check
// every packet softrdma sent (see interop/pcapcheck). README.md in this
// directory explains the setup, the matrix and the knobs.
package interop

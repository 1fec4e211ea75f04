// Package mem holds the memory regions of one device: the key table that maps
// local and remote keys to registered memory, the protection-domain, access
// and bounds checks every data-path access goes through, scatter/gather
// copies between packets and SGE lists, 64-bit atomics on registered memory,
// and device-allocated memory outside the Go heap.
//
// Requests flow through it like this: the verbs layer registers a buffer with
// Table.Register and hands out the MR's LKey and RKey; the engine's requester
// copies a message out of the send SGE list with Table.Gather, the responder
// places incoming SEND payload with Table.Scatter and resolves the R_Key of an
// RDMA READ, WRITE or atomic with Table.Remote, then applies atomics with
// Atomic.
//
// Keys are 32-bit values chosen at random among the unused ones, so a peer
// cannot guess the R_Key of a region it was not told about. Lookups read
// copy-on-write maps (256 shards by the key's low byte) through atomic
// pointers, which Register and Deregister replace: the data path takes no lock
// and allocates nothing, and every check fails with a distinct sentinel error
// (ErrKey, ErrPD, ErrAccess, ErrBounds, ErrLength, ErrAlign) that wraps ErrMem.
package mem

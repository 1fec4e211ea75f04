// Package perftest implements the benchmarks of perftest (ib_write_bw,
// ib_read_bw, ib_send_bw, ib_atomic_bw and their _lat counterparts) on a
// softrdma device, wire-compatible with perftest 4.5 in either role: the
// out-of-band TCP exchange (versions, system data, MTU, per-QP keys, bw
// reports), the order of messages of each program, the measurement loops
// and the perftest-style report tables.
//
// Run runs one side; Config holds perftest's parameters with its defaults
// (Normalize applies them and their dependencies).
package perftest

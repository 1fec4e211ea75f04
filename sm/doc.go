// Package sm is softrdma's InfiniBand subnet manager: it discovers a subnet
// by directed-route SMPs from its own port, assigns LIDs, computes routes,
// programs the switches' forwarding tables and brings every port to ACTIVE,
// over any fabric that speaks the management protocol (softrdma's emulated
// fabric, Linux ibsim's, through a [Transport]).
//
// What a sweep finds is published as an immutable [Subnet] snapshot, which the
// subnet administrator (package sm/sa) answers queries from.
package sm

// Package sm is softrdma's InfiniBand subnet manager: it discovers a subnet
// by directed-route SMPs from its own port, assigns LIDs, computes routes,
// programs the switches' forwarding tables and brings every port to ACTIVE,
// over any fabric that speaks the management protocol (softrdma's emulated
// fabric, Linux ibsim's, through a [Transport]).
//
// What a sweep finds is published as an immutable [Subnet] snapshot, which the
// subnet administrator (package sm/sa) answers queries from.
//
// A [Manager] runs on one Transport: [FabricTransport] attaches it to a port
// of softrdma's in-process fabric, [IbsimTransport] to any server of ibsim's
// client protocol (Linux ibsim, "softrdma fabric"). [Manager.Sweep] runs one
// heavy sweep; [Manager.Run] sweeps, then watches the subnet (light sweeps,
// traps) and negotiates the master with other SMs by SMInfo. Routing is
// min-hop, or up/down ([RoutingUpDown]) where deadlock freedom matters.
// With [Config.Partitions] and [Config.QoS] the heavy sweep also writes
// P_Key tables and QoS tables; [Manager.SetMulticast] programs multicast
// groups into the switches' forwarding tables. Package sm/sa's Attach runs
// the subnet administrator beside a Manager.
package sm

// Package fabric emulates the management plane of an InfiniBand subnet:
// nodes (channel adapters and switches) with their ports and the links
// between them, read from a topology file in the format ibnetdiscover prints
// (ParseTopology), and the subnet management and performance management
// agents of every node.
//
// Management clients (a subnet manager, diagnostics) attach to a CA port or
// to a switch's port 0 (Attach) and send MADs (Client.Send). Directed-route
// SMPs walk their initial path hop by hop and their responses the return
// path back (IBTA volume 1, 14.2.2); LID-routed SMPs and GMPs are forwarded
// by the switches' linear forwarding tables, and dropped, counted, when a
// table has no route or a link is down. Each node's SMA answers Get and Set
// of the SM attributes (NodeInfo, NodeDescription, PortInfo with IBTA's port
// state machine, SwitchInfo, GUIDInfo, P_KeyTable, SL-to-VL and VL
// arbitration tables, linear and multicast forwarding tables) and hands
// SMInfo to an SM client attached at the port; each node's PMA answers
// PortCounters and PortCountersExtended from counters every MAD crossing a
// port moves. Switches send trap 128 to the SM LID when a port's link goes
// down or comes up; a port whose capability mask changes sends trap 144.
//
// The data plane carries native IB packets (LRH through VCRC) between HCAs
// that ConnectHCA attaches to CA ports (the far side of link/ib's Port):
// every direction of every link is a fabric/vl link with per-VL credits,
// switches forward by their LFT and MFT and map SL to VL with the output
// port's SL2VL table, and what has no route, meets a port that is not
// ACTIVE, fails its VCRC or partition enforcement is dropped and counted in
// the PMA counters and DataStats; nothing is dropped for lack of buffer.
// A CA port counts a packet for QP1 with a P_Key or Q_Key it does not
// accept in PortInfo and sends trap 257 or 258 to its SM. Options.LinkRate
// gives the links a wire speed, so that VL arbitration shares a busy link.
//
// The two planes meet where management does: a switch's SMA and PMA answer
// requests HCAs send to the switch's LID on the data plane, and a CA port's
// management clients (an SM with its SA) get the GSI MADs HCAs send there
// (SA queries, RMPP ACKs; every GSI MAD when no HCA is connected at the
// port), their answers going back on the data plane to the requester's LID
// and QP; a client's GMP for an HCA's LID travels on the data plane too.
package fabric

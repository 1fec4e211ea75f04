// Package remote serves the HCA ports of an emulated InfiniBand fabric
// (package fabric) to softrdma devices in other processes and on other
// hosts, so that one fabric spans machines.
//
// The server side (NewServer, Server.Serve) listens on TCP or a unix
// socket. A client connects and names a CA port (a topology node name such
// as "Hca1", or a node or port GUID, and a port number); the server
// connects it to the fabric (fabric.ConnectHCA) and from then on carries,
// on that connection, the port's attributes (and every change the SM
// makes), whole IB packets both ways, and keep-alives. The data VLs are
// flow controlled per VL across the connection, as on an IB link: the
// server grants credits for the room it has on each VL between the
// connection and the fabric, and a client sends on a VL only with them,
// so a VL the fabric holds back stops neither the other VLs nor VL15
// (management, which bypasses credits). A client that
// detaches (Port.Close) leaves the port in the subnet; a client that dies
// or falls silent for three keep-alive intervals takes the port's link
// down, as a pulled cable would (fabric.SetLink: DOWN, and trap 128 from
// the switch to the SM); the next client to attach there plugs it in again.
//
// The client side, Dial, returns an ib.Port: link/ib's New makes it a
// link.Link, and verbs.Open a device whose InfiniBand port is on the
// remote fabric. When the connection is lost the port turns DOWN.
//
// `softrdma fabric -hca ADDR TOPOLOGY` runs such a server beside ibsim's
// protocol (DefaultAddr unless told otherwise).
package remote

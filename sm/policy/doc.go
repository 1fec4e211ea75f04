// Package policy reads a subnet manager's partition and QoS policy in
// OpenSM's formats and says what it means for each port.
//
// ParsePartitions reads a partitions.conf (OpenSM's partition manager
// file: partition definitions with a P_Key, flags and a member list of
// port GUIDs and the groups ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS and
// SELF). (*Partitions).PKeys gives the P_Key table of an end port or of a
// switch external port, and (*Partitions).Enforce says whether a switch
// external port enforces partitions: as OpenSM does, a switch port whose
// link leads to an end port (a CA or a router) holds that port's
// partitions and checks them on packets in both directions.
//
// ParseQoS reads the QoS options of an opensm.conf (qos, qos_max_vls,
// qos_high_limit, qos_vlarb_high, qos_vlarb_low, qos_sl2vl and their
// per-port-type variants qos_ca_, qos_swe_, qos_sw0_ and qos_rtr_, and
// max_op_vls), and
// (*QoS).Port gives a port's operational VLs, SL-to-VL table, VL
// arbitration table blocks and high-priority limit, fitted to what the
// port can hold as OpenSM fits them.
//
// ParseQoSPolicy reads the part of an OpenSM qos-policy.conf that gives
// paths their service level (port groups by GUID, QoS levels, match rules
// and qos-ulps); (*QoSPolicy).SL applies it to a path, as the SA does for
// PathRecords (sa.Config.QoSPolicy).
//
// The package only computes: the subnet manager (package sm) writes the
// tables with SMPs. It imports wire/mad and the standard library only.
package policy

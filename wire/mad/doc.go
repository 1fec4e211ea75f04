// Package mad encodes and decodes InfiniBand management datagrams (MADs) of
// the Communication Manager (CM) class, the messages Linux rdma_cm exchanges
// to set up and tear down connections over RoCEv2.
//
// A CM MAD is 256 bytes and travels as the payload of a UD SEND ONLY packet
// to QP1 (the general services interface), with Q_Key GSIQKey in its DETH:
//
//	MAD header (24) | CM message (232)
//
// The message is one of REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ or
// SIDR_REP, chosen by the header's attribute ID. Each is a named []byte view
// over the 232 message bytes with a getter and a setter per field, plus a
// Fields struct holding the decoded values, whose Encode writes them back.
// The layouts follow IBTA volume 1 chapter 12 (tables 106 to 120) as Linux
// implements them in include/rdma/ibta_vol1_c12.h.
//
// Parse checks a received MAD once (length, base and class version) and
// returns a MAD whose accessors, and those of the message MAD.CM returns,
// cannot panic. EncodeCM writes a whole CM MAD into a caller's buffer.
//
// When rdma_cm runs over IP addresses, the first 36 bytes of the private
// data of REQ and SIDR_REQ carry its own header, CMAHeader, and the service
// ID encodes a port space and a port (ServiceID, SplitServiceID).
//
// For InfiniBand subnet management the package also has the codecs of the
// attributes SMPs carry (class ClassSubnLID or ClassSubnDirected: NodeInfo,
// NodeDescription, PortInfo, SwitchInfo, GUIDInfo, PKeyTable, SLToVLTable,
// VLArbTable, LinearFT, MulticastFT, SMInfo and Notice, IBTA volume 1
// section 14.2.5) and of the performance management class (ClassPerf:
// PortCounters, PortCountersExt) and the generic ClassPortInfo. Each is a
// struct with a field per attribute field, Parse<Name> decoding it from
// an attribute's bytes (an error wrapping ErrTruncated if they are too
// few) and Encode writing it back. SM attribute IDs share values with the
// CM's, so AttributeID.String names only the CM's; AttrName takes the
// class.
//
// Subnet administration (class ClassSubnAdm) has its own layout, SAMAD: the
// MAD header, an RMPP header (RMPPHeader: DATA, ACK, STOP and ABORT of the
// reliable multi-packet protocol that carries table answers), the SA header
// (SAHeader: SM_Key, AttributeOffset, ComponentMask) and 200 bytes of
// records. The records NodeRecord, PortInfoRecord, SwitchInfoRecord,
// LinkRecord, ServiceRecord, PathRecord and MCMemberRecord have codecs of
// the same shape, and each a table of its components (such as
// PathRecordComponents) that MatchComponents uses to compare a query with a
// record on the components its mask selects.
//
// Views must be at least as long as their message; Parse guarantees that for
// the views it hands out. Setters keep only as many low bits of a value as
// the field has. The package imports only the standard library.
package mad

package policy

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/wire/mad"
)

// DefaultPKey is the default partition's P_Key (without the membership
// bit).
const DefaultPKey = 0x7FFF

// fullBit is a P_Key's membership bit: set for a full member.
const fullBit = 0x8000

// maxPolicyBytes bounds what the parsers read.
const maxPolicyBytes = 4 << 20

// Membership is a port's membership in a partition.
type Membership uint8

// Memberships. Both gives a port a full and a limited entry when
// Partitions.AllowBothPKeys is set, and a full one otherwise, as OpenSM
// does without and with --allow_both_pkeys.
const (
	Limited Membership = 1 << iota
	Full
	Both = Limited | Full
)

// String returns full, limited or both, as partitions.conf writes them.
func (m Membership) String() string {
	switch m {
	case Limited:
		return "limited"
	case Full:
		return "full"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Membership(%d)", uint8(m))
}

// Group names a set of end ports in a member list.
type Group uint8

// Groups of a member list; GroupGUID is one port named by its GUID.
const (
	GroupGUID     Group = iota
	GroupAll            // ALL: every end port
	GroupCAs            // ALL_CAS: every CA port
	GroupSwitches       // ALL_SWITCHES: every switch's port 0
	GroupRouters        // ALL_ROUTERS: every router port
	GroupSelf           // SELF: the SM's own port
)

var groupNames = map[string]Group{
	"ALL": GroupAll, "ALL_CAS": GroupCAs, "ALL_SWITCHES": GroupSwitches,
	"ALL_ROUTERS": GroupRouters, "SELF": GroupSelf,
}

// Member is one entry of a partition's member list.
type Member struct {
	Group      Group
	GUID       uint64 // the port GUID when Group is GroupGUID
	Membership Membership
}

// MulticastGroup is an mgid entry of a partition, or the flags of its
// IPoIB broadcast group. Zero fields were not given (OpenSM's defaults
// apply).
type MulticastGroup struct {
	MGID      [16]byte
	Rate      uint8
	MTU       uint8
	SL        uint8
	Scope     uint8
	QKey      uint32
	TClass    uint8
	FlowLabel uint32
}

// Partition is a partition of the configuration: the definitions of one
// P_Key merged, in the order they came.
type Partition struct {
	Name    string // the first definition's name
	PKey    uint16 // 15 bits
	IPoIB   bool   // the ipoib flag: an IPoIB broadcast group is wanted
	Index0  bool   // the indx0 flag: the key goes at P_Key index 0
	Members []Member
	// Broadcast holds the mgroup flags of the header (rate, mtu, sl,
	// scope, Q_Key, TClass, FlowLabel) for the IPoIB broadcast group.
	Broadcast MulticastGroup
	Groups    []MulticastGroup // mgid entries
	Line      int              // where the first definition starts
}

// Partitions is a partition configuration. A nil *Partitions is OpenSM's
// configuration without a partitions file: the default partition with
// every port a full member.
type Partitions struct {
	// Parts are the partitions, the default partition (P_Key 0x7FFF)
	// first, then the others in the order the file defines them.
	Parts []*Partition
	// AllowBothPKeys lets a port hold a full and a limited entry of one
	// partition (OpenSM's --allow_both_pkeys); without it Both is full.
	AllowBothPKeys bool
	// NoEnforcement turns partition enforcement on switch ports off
	// (OpenSM's --part_enforce off). The zero value enforces inbound
	// and outbound (--part_enforce both).
	NoEnforcement bool
}

// DefaultPartitions returns the configuration OpenSM uses without a
// partitions file: Default=0x7fff : ALL=full ;
func DefaultPartitions() *Partitions {
	return &Partitions{Parts: []*Partition{{Name: "Default", PKey: DefaultPKey,
		Members: []Member{{Group: GroupAll, Membership: Full}}}}}
}

// ParsePartitions reads a partitions.conf in OpenSM's format:
//
//	[Name][=PKey][,ipoib][,indx0][,defmember=full|limited|both][,mgroup flags] : [members] ;
//
// where the members are port GUIDs (0x hex or decimal) and the groups ALL,
// ALL_CAS, ALL_SWITCHES, ALL_ROUTERS and SELF, each with an optional
// =full, =limited or =both (an unknown word is limited, as in OpenSM; the
// default is the defmember flag's, else limited), and lines
// "mgid=GID[,flags]". '#' starts a comment, a definition may span lines
// (a backslash at the end of a line joins it to the next), and
// definitions of one P_Key merge. A definition without a P_Key gets the
// lowest key no other partition uses (Default gets 0x7FFF). Without a rule
// for the default partition the result has
// Default=0x7fff : ALL=limited, SELF=full ; and the SM's port is always a
// full member of it. Errors name the line and wrap ErrSyntax.
func ParsePartitions(r io.Reader) (*Partitions, error) {
	src, err := io.ReadAll(io.LimitReader(r, maxPolicyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(src) > maxPolicyBytes {
		return nil, &SyntaxError{File: "partitions", Line: 1, Msg: fmt.Sprintf("file longer than %d bytes", maxPolicyBytes)}
	}
	ps := &Partitions{}
	byKey := map[uint16]*Partition{}
	var auto []*Partition // definitions without a P_Key, in order
	var order []*Partition
	stmts, err := statements(string(src))
	if err != nil {
		return nil, err
	}
	for _, st := range stmts {
		p, explicit, err := parseDefinition(st)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		if !explicit {
			auto = append(auto, p)
			order = append(order, p)
			continue
		}
		if q, ok := byKey[p.PKey]; ok {
			q.merge(p)
			continue
		}
		byKey[p.PKey] = p
		order = append(order, p)
	}
	next := uint16(1)
	for _, p := range auto {
		for byKey[next] != nil || next == DefaultPKey {
			next++
			if next > 0x7FFE {
				return nil, &SyntaxError{File: "partitions", Line: p.Line, Msg: "no P_Key left to give the partition"}
			}
		}
		p.PKey = next
		byKey[next] = p
	}
	def := byKey[DefaultPKey]
	if def == nil {
		def = &Partition{Name: "Default", PKey: DefaultPKey,
			Members: []Member{{Group: GroupAll, Membership: Limited}}}
		order = append(order, def)
	}
	def.Members = append(def.Members, Member{Group: GroupSelf, Membership: Full})
	ps.Parts = append(ps.Parts, def)
	for _, p := range order {
		if p != def {
			ps.Parts = append(ps.Parts, p)
		}
	}
	return ps, nil
}

func (p *Partition) merge(q *Partition) {
	p.IPoIB = p.IPoIB || q.IPoIB
	p.Index0 = p.Index0 || q.Index0
	p.Members = append(p.Members, q.Members...)
	p.Groups = append(p.Groups, q.Groups...)
	if p.Broadcast == (MulticastGroup{}) {
		p.Broadcast = q.Broadcast
	}
}

// statement is a definition's text (comments removed, lines joined) and
// the line it starts on; lineAt maps offsets in text to lines.
type statement struct {
	text  string
	line  int
	lines []int // lines[i]: the line of text[i]
}

func (s statement) lineOf(off int) int {
	if off >= 0 && off < len(s.lines) {
		return s.lines[off]
	}
	return s.line
}

// statements splits src into definitions ended by ';'.
func statements(src string) ([]statement, error) {
	var out []statement
	var cur strings.Builder
	var lines []int
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 4096), maxPolicyBytes+1)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimRight(line, " \t\r")
		cont := strings.HasSuffix(line, "\\")
		if cont {
			line = line[:len(line)-1]
		}
		for i := 0; i < len(line); i++ {
			c := line[i]
			if c == ';' {
				s := cur.String()
				if strings.TrimSpace(s) != "" {
					start := 0
					for start < len(s) && isSpace(s[start]) {
						start++
					}
					out = append(out, statement{text: s, line: lines[start], lines: lines})
				}
				cur.Reset()
				lines = nil
				continue
			}
			if c < 0x20 && c != '\t' || c == 0x7F {
				return nil, &SyntaxError{File: "partitions", Line: n, Msg: fmt.Sprintf("control character %#02x", c)}
			}
			cur.WriteByte(c)
			lines = append(lines, n)
		}
		if !cont {
			// A newline separates mgid entries from what follows.
			cur.WriteByte('\n')
			lines = append(lines, n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &SyntaxError{File: "partitions", Line: n + 1, Msg: err.Error()}
	}
	if s := cur.String(); strings.TrimSpace(s) != "" {
		start := 0
		for start < len(s) && isSpace(s[start]) {
			start++
		}
		return nil, &SyntaxError{File: "partitions", Line: lines[start], Msg: "definition not ended by ';'"}
	}
	return out, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// parseDefinition parses one definition; explicit says it named its
// P_Key.
func parseDefinition(st statement) (*Partition, bool, error) {
	fail := func(off int, format string, a ...any) (*Partition, bool, error) {
		return nil, false, &SyntaxError{File: "partitions", Line: st.lineOf(off), Msg: fmt.Sprintf(format, a...)}
	}
	colon := strings.IndexByte(st.text, ':')
	if colon < 0 {
		return fail(-1, "definition without ':' between the partition and its members")
	}
	header := strings.ReplaceAll(st.text[:colon], "\n", " ")
	p := &Partition{Line: st.line}
	def := Limited
	fields := strings.Split(header, ",")
	nameKey := strings.TrimSpace(fields[0])
	name, key, hasKey := strings.Cut(nameKey, "=")
	p.Name = strings.TrimSpace(name)
	explicit := false
	if hasKey {
		k, err := strconv.ParseUint(strings.TrimSpace(key), 0, 16)
		if err != nil {
			return fail(-1, "P_Key %q: not a 16-bit number", strings.TrimSpace(key))
		}
		p.PKey = uint16(k) & 0x7FFF
		if p.PKey == 0 {
			return fail(-1, "P_Key %#x: the low 15 bits are 0, an invalid key", k)
		}
		explicit = true
	} else if strings.EqualFold(p.Name, "Default") {
		p.PKey, explicit = DefaultPKey, true
	}
	for _, f := range fields[1:] {
		if err := p.headerFlag(strings.TrimSpace(f), &def); err != nil {
			return fail(-1, "%v", err)
		}
	}
	// Members: by line, so that an mgid entry ends at its newline.
	body := st.text[colon+1:]
	off := colon + 1
	for _, line := range strings.SplitAfter(body, "\n") {
		lineOff := off
		off += len(line)
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if strings.HasPrefix(strings.ToLower(t), "mgid=") {
			g, err := parseMGID(t, p.PKey)
			if err != nil {
				return fail(lineOff, "%v", err)
			}
			p.Groups = append(p.Groups, g)
			continue
		}
		// OpenSM's example puts flags after a second ':' too.
		if i := strings.LastIndexByte(t, ':'); i >= 0 {
			for _, f := range strings.Split(t[:i], ",") {
				if err := p.headerFlag(strings.TrimSpace(f), &def); err != nil {
					return fail(lineOff, "%v", err)
				}
			}
			t = t[i+1:]
		}
		for _, tok := range strings.Split(t, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" {
				continue
			}
			m, err := parseMember(tok, def)
			if err != nil {
				return fail(lineOff, "%v", err)
			}
			p.Members = append(p.Members, m)
		}
	}
	return p, explicit, nil
}

// headerFlag applies one flag of a definition's header.
func (p *Partition) headerFlag(f string, def *Membership) error {
	if f == "" {
		return nil
	}
	k, v, hasV := strings.Cut(f, "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	switch strings.ToLower(k) {
	case "ipoib":
		p.IPoIB = true
		return nil
	case "indx0":
		p.Index0 = true
		return nil
	case "defmember":
		m, ok := membership(v)
		if !ok {
			return fmt.Errorf("defmember=%q: want full, limited or both", v)
		}
		*def = m
		return nil
	}
	if !hasV {
		return fmt.Errorf("unknown partition flag %q", f)
	}
	return groupFlag(&p.Broadcast, k, v)
}

// groupFlag applies an mgroup flag.
func groupFlag(g *MulticastGroup, k, v string) error {
	num := func(bits int) (uint64, error) {
		n, err := strconv.ParseUint(v, 0, bits)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: not a %d-bit number", k, v, bits)
		}
		return n, nil
	}
	var n uint64
	var err error
	switch strings.ToLower(k) {
	case "rate":
		n, err = num(6)
		g.Rate = uint8(n)
	case "mtu":
		n, err = num(6)
		g.MTU = uint8(n)
	case "sl":
		n, err = num(4)
		g.SL = uint8(n)
	case "scope":
		n, err = num(4)
		g.Scope = uint8(n)
	case "q_key":
		n, err = num(32)
		g.QKey = uint32(n)
	case "tclass":
		n, err = num(8)
		g.TClass = uint8(n)
	case "flowlabel":
		n, err = num(20)
		g.FlowLabel = uint32(n)
	default:
		return fmt.Errorf("unknown flag %q", k+"="+v)
	}
	return err
}

// parseMGID parses "mgid=GID[,flag]*". An IPoIB group (signature 0x401B
// or 0x601B) with a zero P_Key field gets the partition's key.
func parseMGID(t string, pkey uint16) (MulticastGroup, error) {
	var g MulticastGroup
	parts := strings.Split(t, ",")
	_, gid, _ := strings.Cut(parts[0], "=")
	gid = strings.TrimSpace(gid)
	a, err := netip.ParseAddr(gid)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return g, fmt.Errorf("mgid %q: not a GID", gid)
	}
	g.MGID = a.As16()
	if g.MGID[0] != 0xFF {
		return g, fmt.Errorf("mgid %q: not a multicast GID", gid)
	}
	for _, f := range parts[1:] {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return g, fmt.Errorf("mgid flag %q: want name=value", f)
		}
		if err := groupFlag(&g, strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return g, err
		}
	}
	if g.Scope != 0 {
		g.MGID[1] = g.MGID[1]&0xF0 | g.Scope
	}
	sig := uint16(g.MGID[2])<<8 | uint16(g.MGID[3])
	if (sig == 0x401B || sig == 0x601B) && g.MGID[4] == 0 && g.MGID[5] == 0 {
		k := pkey | fullBit
		g.MGID[4], g.MGID[5] = byte(k>>8), byte(k)
	}
	return g, nil
}

func membership(s string) (Membership, bool) {
	switch strings.ToLower(s) {
	case "full":
		return Full, true
	case "limited":
		return Limited, true
	case "both":
		return Both, true
	}
	return 0, false
}

// parseMember parses "GUID|GROUP[=full|limited|both]".
func parseMember(tok string, def Membership) (Member, error) {
	who, mem, hasMem := strings.Cut(tok, "=")
	who = strings.TrimSpace(who)
	m := Member{Membership: def}
	if hasMem {
		var ok bool
		if m.Membership, ok = membership(strings.TrimSpace(mem)); !ok {
			m.Membership = Limited // OpenSM: unrecognized is limited
		}
	}
	if g, ok := groupNames[strings.ToUpper(who)]; ok {
		m.Group = g
		return m, nil
	}
	guid, err := strconv.ParseUint(who, 0, 64)
	if err != nil || guid == 0 {
		return m, fmt.Errorf("member %q: not a port GUID or ALL, ALL_CAS, ALL_SWITCHES, ALL_ROUTERS, SELF", who)
	}
	m.GUID = guid
	return m, nil
}

// PortRef describes a port for the policy: what the SM knows of it from
// NodeInfo, PortInfo and SwitchInfo.
type PortRef struct {
	NodeType uint8 // mad.NodeTypeCA, mad.NodeTypeSwitch or mad.NodeTypeRouter
	NodeGUID uint64
	PortGUID uint64 // a CA's or router's port GUID; a switch's is port 0's
	Port     uint8  // the port number; 0 is a switch's management port
	SM       bool   // the SM's own port (SELF)
	// EnhancedPort0 says a switch's port 0 is enhanced (the qos_sw0_
	// options apply to it).
	EnhancedPort0 bool
	// PKeyCap bounds the P_Key table: NodeInfo.PartitionCap for an end
	// port, SwitchInfo.PartitionEnforcementCap for a switch external
	// port; 0 is no bound.
	PKeyCap int
	// VLCap, VLArbHighCap and VLArbLowCap are the PortInfo fields of
	// those names (VLCap coded 1 VL0 ... 5 VL0-14; 0 is taken as 5).
	VLCap, VLArbHighCap, VLArbLowCap uint8
	// Peer is, for a switch external port, the end port at the other end
	// of its link; nil when it leads to another switch or nowhere.
	Peer *PortRef
}

// isEndPort reports whether p is an end port: a CA or router port or a
// switch's port 0.
func (p PortRef) isEndPort() bool { return p.NodeType != mad.NodeTypeSwitch || p.Port == 0 }

// matches reports whether member m names end port p.
func (m Member) matches(p PortRef) bool {
	switch m.Group {
	case GroupGUID:
		return m.GUID == p.PortGUID
	case GroupAll:
		return true
	case GroupCAs:
		return p.NodeType == mad.NodeTypeCA
	case GroupSwitches:
		return p.NodeType == mad.NodeTypeSwitch
	case GroupRouters:
		return p.NodeType == mad.NodeTypeRouter
	case GroupSelf:
		return p.SM
	}
	return false
}

// Membership returns end port p's membership in partition pkey (15 bits),
// 0 if it is not a member.
func (ps *Partitions) Membership(p PortRef, pkey uint16) Membership {
	if ps == nil {
		ps = DefaultPartitions()
	}
	for _, part := range ps.Parts {
		if part.PKey == pkey&0x7FFF {
			return part.membership(p)
		}
	}
	return 0
}

func (part *Partition) membership(p PortRef) Membership {
	var m Membership
	for _, mem := range part.Members {
		if mem.matches(p) {
			m |= mem.Membership
		}
	}
	return m
}

// PKeys returns the P_Key table of port p, membership bit set (0x8000 a
// full member). For an end port (a CA or router port, a switch's port 0)
// it holds the key of each partition the port is a member of: at index 0
// the key of the first indx0 partition it belongs to, else the default
// partition's, then the others in the configuration's order, cut to
// p.PKeyCap. For a switch external port it is the set of partitions of the
// end port its link leads to, every key with the full bit (the switch
// checks the partition and leaves the membership rule to the end ports: a
// limited entry would refuse a limited member's own packets); nil when
// Enforce says the port does not enforce. A nil *Partitions gives every
// end port the full default key.
func (ps *Partitions) PKeys(p PortRef) []uint16 {
	if ps == nil {
		ps = DefaultPartitions()
	}
	if !p.isEndPort() {
		if in, out := ps.Enforce(p); !in && !out {
			return nil
		}
		return ps.switchKeys(p)
	}
	keys := ps.endKeys(p)
	if p.PKeyCap > 0 && len(keys) > p.PKeyCap {
		keys = keys[:p.PKeyCap]
	}
	return keys
}

func (ps *Partitions) endKeys(p PortRef) []uint16 {
	var keys []uint16
	add := func(part *Partition, m Membership) {
		switch {
		case m == Both && ps.AllowBothPKeys:
			keys = append(keys, part.PKey|fullBit, part.PKey)
		case m&Full != 0:
			keys = append(keys, part.PKey|fullBit)
		case m == Limited:
			keys = append(keys, part.PKey)
		}
	}
	first := -1
	for i, part := range ps.Parts {
		if part.Index0 && part.membership(p) != 0 {
			first = i
			break
		}
	}
	if first < 0 {
		for i, part := range ps.Parts {
			if part.PKey == DefaultPKey {
				first = i
				break
			}
		}
	}
	if first >= 0 {
		add(ps.Parts[first], ps.Parts[first].membership(p))
	}
	for i, part := range ps.Parts {
		if i != first {
			add(part, part.membership(p))
		}
	}
	return keys
}

func (ps *Partitions) switchKeys(p PortRef) []uint16 {
	var keys []uint16
	for _, k := range ps.endKeys(*p.Peer) {
		if k |= fullBit; !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// Enforce reports whether switch external port p checks partitions on
// packets coming in and going out, as OpenSM sets it: a port whose link
// leads to an end port enforces both ways, unless enforcement is off
// or the end port's partitions do not fit in p.PKeyCap entries (OpenSM
// then leaves the port open). End ports and ports between switches do not
// enforce.
func (ps *Partitions) Enforce(p PortRef) (inbound, outbound bool) {
	if ps == nil {
		ps = DefaultPartitions()
	}
	if p.isEndPort() || p.Peer == nil || !p.Peer.isEndPort() || ps.NoEnforcement {
		return false, false
	}
	if p.PKeyCap > 0 && len(ps.switchKeys(p)) > p.PKeyCap {
		return false, false
	}
	return true, true
}

// PKeyTableBlocks packs a P_Key table into P_KeyTable blocks of 32
// entries (empty entries 0), as many as needed for keys but at least one;
// block i goes in the SMP with modifier mad.PKeyTableModifier(port, i).
func PKeyTableBlocks(keys []uint16) []mad.PKeyTable {
	n := max(1, (len(keys)+31)/32)
	out := make([]mad.PKeyTable, n)
	for i, k := range keys {
		out[i/32].PKey[i%32] = k
	}
	return out
}

// EndPortRef returns the PortRef of an end port (a CA or router port, or
// a switch's port 0 with port 0) from what the SM read of it: its node's
// NodeInfo and the port's PortInfo. sm says it is the SM's own port.
func EndPortRef(ni mad.NodeInfo, pi mad.PortInfo, port uint8, sm bool) PortRef {
	return PortRef{NodeType: ni.NodeType, NodeGUID: ni.NodeGUID, PortGUID: ni.PortGUID, Port: port, SM: sm,
		PKeyCap: int(ni.PartitionCap), VLCap: pi.VLCap,
		VLArbHighCap: pi.VLArbitrationHighCap, VLArbLowCap: pi.VLArbitrationLowCap}
}

// SwitchPortRef returns the PortRef of a switch's port (external, or 0)
// from the switch's NodeInfo and SwitchInfo and the port's PortInfo; peer
// is the end port its link leads to (nil: a switch, or no link). Port 0
// is an end port: its PKeyCap is NodeInfo.PartitionCap, an external
// port's SwitchInfo.PartitionEnforcementCap.
func SwitchPortRef(ni mad.NodeInfo, si mad.SwitchInfo, pi mad.PortInfo, port uint8, peer *PortRef) PortRef {
	r := EndPortRef(ni, pi, port, false)
	r.EnhancedPort0 = si.EnhancedPort0
	if port != 0 {
		r.PKeyCap, r.Peer = int(si.PartitionEnforcementCap), peer
	}
	return r
}

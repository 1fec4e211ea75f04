package fabric

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Node types, as NodeInfo's NodeType field carries them.
const (
	nodeCA     = 1
	nodeSwitch = 2
	nodeRouter = 3
)

// Link widths and speeds, as PortInfo's enabled and active fields carry
// them (bit masks).
const (
	width1x  = 1
	width4x  = 2
	width8x  = 4
	width12x = 8
	width2x  = 16

	speedSDR = 1
	speedDDR = 2
	speedQDR = 4
)

// GUID bases ibsim starts from when the topology sets none: CAs at
// 0x100000, switches at 0x200000, routers at 0.
const (
	defaultCAGUID     = 0x100000
	defaultSwitchGUID = 0x200000
)

// speedNames are the speeds ibnetdiscover prints, in the order ibsim
// tries them, with the enabled speeds and extended speeds each sets.
var speedNames = []struct {
	name       string
	speed, ext uint8
}{
	{"SDR", speedSDR, 0},
	{"DDR", speedSDR | speedDDR, 0},
	{"QDR", speedSDR | speedDDR | speedQDR, 0},
	{"FDR", speedSDR | speedDDR | speedQDR, 1},
	{"EDR", speedSDR | speedDDR | speedQDR, 3},
	{"HDR", speedSDR | speedDDR | speedQDR, 7},
	{"NDR", speedSDR | speedDDR | speedQDR, 15},
	{"FDR10", speedSDR | speedDDR | speedQDR, 0},
}

// maxPorts is the largest number of ports a node may have: port 255 is the
// LFT's "no route".
const maxPorts = 254

// Topology is a parsed topology file: nodes in file order with their ports
// and the links between them. ParseTopology makes one; New builds a fabric
// from it. Its fields may be read, not changed.
type Topology struct {
	Name  string      // the name given to ParseTopology, for messages
	Nodes []*TopoNode // in file order
}

// TopoNode is one node of a topology.
type TopoNode struct {
	Type     uint8  // NodeInfo node type: 1 CA, 2 switch, 3 router
	ID       string // the node's name in the file, e.g. "Hca1" or "S-0008f104003f15b2"
	Desc     string // NodeDescription: the text after '#' if any, else ID
	GUID     uint64 // node GUID; a switch's port GUID too, a CA's port i has GUID+i
	SysGUID  uint64 // system image GUID
	VendorID uint32
	DeviceID uint16
	ESP0     int // switches: 1 "enhanced port 0", -1 "base port 0", 0 not said
	// LID and LMC the file gives a switch's port 0 ("lid N lmc M"), if any.
	LID uint16
	LMC uint8
	// Ports[i] is port i; Ports[0] is a switch's management port (a CA's
	// is unused).
	Ports []TopoPort
	line  int
}

// NumPorts returns the number of physical ports.
func (n *TopoNode) NumPorts() int { return len(n.Ports) - 1 }

// TopoPort is one port of a topology node.
type TopoPort struct {
	Remote     string // ID of the node at the other end, "" if unconnected
	RemotePort int
	// Enabled link widths and speeds (PortInfo bit masks).
	WidthEnabled, SpeedEnabled, ExtSpeedEnabled uint8
	// LID and LMC the file gives a CA port ("# lid N lmc M"), if any.
	LID  uint16
	LMC  uint8
	line int
}

type topoParser struct {
	t          *Topology
	name       string
	line       int
	guids      [4]uint64
	absGUIDs   [4]uint64
	vendor     uint32
	device     uint16
	sysGUID    uint64
	width      uint8
	speed      uint8
	extSpeed   uint8
	prefix     string
	byID       map[string]*TopoNode
	byGUID     map[uint64]*TopoNode
	pending    string
	hasPending bool
	sc         *bufio.Scanner
}

func (p *topoParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s:%d: %s", ErrTopology, p.name, p.line, fmt.Sprintf(format, args...))
}

func (p *topoParser) next() (string, bool) {
	if p.hasPending {
		p.hasPending = false
		return p.pending, true
	}
	if !p.sc.Scan() {
		return "", false
	}
	p.line++
	return strings.TrimRight(p.sc.Text(), "\r"), true
}

// ParseTopology reads a topology in the format ibnetdiscover prints, as
// Linux ibsim reads it (ibsim/sim_net.c):
//
//   - node records: a header line "Switch N "id"", "Hca N "id"", "Ca N "id""
//     or "Rt N "id"" (N ports, 1 to 254; optional "# "description"", and for
//     a switch "enhanced port 0"/"base port 0" and "lid L lmc M"), then one
//     line per connected port, "[p] "remote-id"[rp]" (rp defaults to 1),
//     optionally followed by w=, s=, e= (enabled width, speed, extended
//     speed) and ibnetdiscover's "# ... lid L WxSPEED" comment, of which
//     the width and speed are taken (and, on a CA, "lid L lmc M" as the
//     port's own); the record ends at the first line that is not a port or
//     comment line;
//   - settings for the nodes that follow: switchguid=, caguid= (or
//     hcaguids=), rtguid= (absolute "=V" or relative to the last absolute
//     "+V"), sysimgguid=, vendid=, devid=, width=, speed=, extspeed=, and
//     module="prefix" (node IDs become prefix#id);
//   - lines starting with '#' and any other line are ignored.
//
// GUIDs come as ibsim derives them: a node takes the current base of its
// type; a switch then advances it by 1, a CA or router by its number of
// ports plus one (CA port i has GUID node+i). sysimgguid and vendid apply
// to the next node only. Every link must be listed from both ends. include
// and do lines, and port aliases ('@'), are refused.
func ParseTopology(r io.Reader, name string) (*Topology, error) {
	p := &topoParser{
		t:      &Topology{Name: name},
		name:   name,
		width:  width4x,
		speed:  speedSDR,
		byID:   make(map[string]*TopoNode),
		byGUID: make(map[uint64]*TopoNode),
		sc:     bufio.NewScanner(r),
	}
	p.guids = [4]uint64{^uint64(0), defaultCAGUID, defaultSwitchGUID, 0}
	p.absGUIDs = p.guids
	p.sc.Buffer(make([]byte, 4096), 64*1024)
	for {
		line, ok := p.next()
		if !ok {
			break
		}
		if err := p.topLine(line); err != nil {
			return nil, err
		}
	}
	if err := p.sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s:%d: %v", ErrTopology, name, p.line+1, err)
	}
	if err := p.connect(); err != nil {
		return nil, err
	}
	if len(p.t.Nodes) == 0 {
		return nil, fmt.Errorf("%w: %s: no nodes", ErrTopology, name)
	}
	return p.t, nil
}

func (p *topoParser) topLine(line string) error {
	var err error
	switch {
	case strings.HasPrefix(line, "Switch"):
		err = p.node(line, nodeSwitch, 6)
	case strings.HasPrefix(line, "Hca"), strings.HasPrefix(line, "Ca"):
		err = p.node(line, nodeCA, 3)
	case strings.HasPrefix(line, "Rt"):
		err = p.node(line, nodeRouter, 3)
	case strings.HasPrefix(line, "switchguid"):
		err = p.guidBase(line, nodeSwitch)
	case strings.HasPrefix(line, "hcaguids"), strings.HasPrefix(line, "caguid"):
		err = p.guidBase(line, nodeCA)
	case strings.HasPrefix(line, "rtguid"):
		err = p.guidBase(line, nodeRouter)
	case strings.HasPrefix(line, "vendid"):
		var v uint64
		v, err = p.assign(line, 32)
		p.vendor = uint32(v)
	case strings.HasPrefix(line, "devid"):
		var v uint64
		v, err = p.assign(line, 16)
		p.device = uint16(v)
	case strings.HasPrefix(line, "sysimgguid"):
		p.sysGUID, err = p.assign(line, 64)
	case strings.HasPrefix(line, "width"):
		var v uint64
		if v, err = p.assign(line, 8); err == nil {
			if v < 1 || v > 31 {
				return p.errorf("bad enabled link width %d, want 1 to 31", v)
			}
			p.width = uint8(v)
		}
	case strings.HasPrefix(line, "speed"):
		var v uint64
		if v, err = p.assign(line, 8); err == nil {
			if v < 1 || v > 7 {
				return p.errorf("bad enabled link speed %d, want 1 to 7", v)
			}
			p.speed = uint8(v)
		}
	case strings.HasPrefix(line, "extspeed"):
		var v uint64
		if v, err = p.assign(line, 8); err == nil {
			if v > 15 {
				return p.errorf("bad extended link speed %d, want 0 to 15", v)
			}
			p.extSpeed = uint8(v)
		}
	case strings.HasPrefix(line, "module"):
		_, rest, ok := strings.Cut(line, "=")
		id, _, ok2 := quoted(rest)
		if !ok || !ok2 || id == "" || len(id) > 20 {
			return p.errorf("bad module line %q", line)
		}
		p.prefix = id
	case strings.HasPrefix(line, "include"), strings.HasPrefix(line, "do"):
		return p.errorf("%q: include and do lines are not supported", line)
	default:
		// Anything else, port lines outside a record included, is
		// ignored, as ibsim ignores it.
	}
	return err
}

// assign parses the number after '=' (C strtoull: 0x hex, 0 octal,
// decimal), stopping at the first character that is not a digit.
func (p *topoParser) assign(line string, bits int) (uint64, error) {
	_, v, ok := strings.Cut(line, "=")
	if !ok {
		return 0, p.errorf("bad assignment %q: missing '='", line)
	}
	n, ok := cNumber(v, bits)
	if !ok {
		return 0, p.errorf("bad number in %q", line)
	}
	return n, nil
}

// cNumber parses a leading unsigned number as strtoull(s, NULL, 0) does,
// requiring at least one digit and that it fit in bits.
func cNumber(s string, bits int) (uint64, bool) {
	s = strings.TrimLeft(s, " \t")
	base := 10
	digits := "0123456789"
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") && strings.ContainsRune("0123456789abcdefABCDEF", rune(s[2])):
		s, base, digits = s[2:], 16, "0123456789abcdefABCDEF"
	case len(s) > 1 && s[0] == '0':
		base, digits = 8, "01234567"
	}
	end := 0
	for end < len(s) && strings.IndexByte(digits, s[end]) >= 0 {
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:end], base, bits)
	return n, err == nil
}

func (p *topoParser) guidBase(line string, typ int) error {
	i := strings.IndexAny(line, "=+")
	if i < 0 {
		return p.errorf("bad assignment %q: missing '=' or '+'", line)
	}
	v, ok := cNumber(line[i+1:], 64)
	if !ok {
		return p.errorf("bad GUID in %q", line)
	}
	if line[i] == '+' {
		p.guids[typ] = p.absGUIDs[typ] + v
	} else {
		p.absGUIDs[typ] = v
		p.guids[typ] = v
	}
	return nil
}

// quoted returns the text between the first two double quotes of s and
// what follows the second.
func quoted(s string) (string, string, bool) {
	i := strings.IndexByte(s, '"')
	if i < 0 {
		return "", "", false
	}
	j := strings.IndexByte(s[i+1:], '"')
	if j < 0 {
		return "", "", false
	}
	return s[i+1 : i+1+j], s[i+1+j+1:], true
}

func (p *topoParser) nodeID(base string) (string, error) {
	if strings.ContainsAny(base, "#@") {
		return "", p.errorf("bad node id %q: '#' and '@' are reserved", base)
	}
	if p.prefix != "" {
		return p.prefix + "#" + base, nil
	}
	return base, nil
}

func (p *topoParser) node(line string, typ int, skip int) error {
	head := line[min(skip, len(line)):]
	i := strings.IndexAny(head, "0123456789")
	if i < 0 {
		return p.errorf("node line %q: no port count", line)
	}
	nports, ok := cNumber(head[i:], 32)
	if !ok || nports < 1 || nports > maxPorts {
		return p.errorf("node line %q: port count must be 1 to %d", line, maxPorts)
	}
	base, rest, ok := quoted(line)
	if !ok || base == "" {
		return p.errorf("node line %q: no quoted node id", line)
	}
	id, err := p.nodeID(base)
	if err != nil {
		return err
	}
	if _, dup := p.byID[id]; dup {
		return p.errorf("node id %q already exists", id)
	}
	desc, after := nodeDesc(rest)
	guid := p.guids[typ]
	if prev, dup := p.byGUID[guid]; dup {
		return p.errorf("node %q: GUID %#x already taken by %q", id, guid, prev.ID)
	}
	n := &TopoNode{
		Type:     uint8(typ),
		ID:       id,
		Desc:     desc,
		GUID:     guid,
		SysGUID:  guid,
		VendorID: p.vendor,
		DeviceID: p.device,
		Ports:    make([]TopoPort, nports+1),
		line:     p.line,
	}
	if n.Desc == "" {
		n.Desc = id
	}
	if p.sysGUID != 0 {
		n.SysGUID = p.sysGUID
	}
	p.vendor, p.sysGUID = 0, 0
	if typ == nodeSwitch {
		p.guids[typ]++
		if after != "" {
			if strings.Contains(after, "enhanced port 0") {
				n.ESP0 = 1
			} else if strings.Contains(after, "base port 0") {
				n.ESP0 = -1
			}
			n.LID, n.LMC = lidLMC(after)
		}
	} else {
		p.guids[typ] += nports + 1
	}
	for i := range n.Ports {
		n.Ports[i].WidthEnabled = p.width
		n.Ports[i].SpeedEnabled = p.speed
		n.Ports[i].ExtSpeedEnabled = p.extSpeed
	}
	p.byID[id] = n
	p.byGUID[guid] = n
	p.t.Nodes = append(p.t.Nodes, n)
	return p.ports(n)
}

// nodeDesc returns the description after '#' in a header's tail ("quoted"
// or up to " enhanced port ", " base port ", " lid ", " lmc ") and what
// follows it.
func nodeDesc(s string) (desc, rest string) {
	i := strings.IndexByte(s, '#')
	if i < 0 {
		return "", ""
	}
	s = strings.TrimLeft(s[i+1:], " \t")
	if strings.HasPrefix(s, "\"") {
		s = s[1:]
		if j := strings.IndexByte(s, '"'); j >= 0 {
			return s[:j], s[j+1:]
		}
		return s, ""
	}
	for _, stop := range []string{" enhanced port ", " base port ", " lid ", " lmc "} {
		if j := strings.Index(s, stop); j >= 0 {
			return s[:j], s[j:]
		}
	}
	return s, ""
}

// lidLMC reads "lid N" and "lmc M" from s, if there.
func lidLMC(s string) (uint16, uint8) {
	var lid uint16
	var lmc uint8
	if i := strings.Index(s, "lid "); i >= 0 {
		if v, ok := cNumber(s[i+4:], 16); ok {
			lid = uint16(v)
		}
	}
	if i := strings.Index(s, "lmc "); i >= 0 {
		if v, ok := cNumber(s[i+4:], 3); ok {
			lmc = uint8(v)
		}
	}
	return lid, lmc
}

func (p *topoParser) ports(n *TopoNode) error {
	left := n.NumPorts()
	for left > 0 {
		line, ok := p.next()
		if !ok {
			return nil
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "@") {
			return p.errorf("port aliases ('@') are not supported")
		}
		if !strings.HasPrefix(line, "[") {
			p.pending, p.hasPending = line, true
			return nil
		}
		if err := p.port(n, line); err != nil {
			return err
		}
		left--
	}
	return nil
}

func (p *topoParser) port(n *TopoNode, line string) error {
	num, ok := cNumber(line[1:], 16)
	if !ok || num < 1 || int(num) > n.NumPorts() {
		return p.errorf("bad port number in %q (node %q has %d ports)", line, n.ID, n.NumPorts())
	}
	pt := &n.Ports[num]
	if pt.Remote != "" {
		return p.errorf("port %d of %q listed twice", num, n.ID)
	}
	rbase, rest, ok := quoted(line)
	if !ok || rbase == "" {
		return p.errorf("invalid remote node id in %q", line)
	}
	if strings.Contains(rbase, "@") {
		return p.errorf("port aliases ('@') are not supported")
	}
	remote := rbase
	if p.prefix != "" && !strings.Contains(rbase, "#") {
		remote = p.prefix + "#" + rbase
	}
	rport := uint64(1)
	if strings.HasPrefix(rest, "[") {
		v, ok := cNumber(rest[1:], 16)
		if !ok || v == 0 {
			return p.errorf("invalid remote port in %q", line)
		}
		rport = v
	}
	pt.Remote, pt.RemotePort, pt.line = remote, int(rport), p.line
	// Options: w=, s=, e= anywhere after the remote id.
	for s := rest; ; {
		i := strings.IndexByte(s, '=')
		if i < 0 {
			break
		}
		// The option's letter is the nearest letter before '=', as in
		// ibsim ("w=4", "w = 4").
		k := i - 1
		for k >= 0 && !isLetter(s[k]) {
			k--
		}
		if k >= 0 {
			v, ok := cNumber(s[i+1:], 8)
			switch s[k] {
			case 'w':
				if !ok || v < 1 || v > 31 {
					return p.errorf("bad width option in %q", line)
				}
				pt.WidthEnabled = uint8(v)
			case 's':
				if !ok || v > 7 {
					return p.errorf("bad speed option in %q", line)
				}
				if v == 0 {
					v = speedQDR
				}
				pt.SpeedEnabled = uint8(v)
			case 'e':
				if !ok || v > 15 {
					return p.errorf("bad extended speed option in %q", line)
				}
				pt.ExtSpeedEnabled = uint8(v)
			}
		}
		s = s[i+1:]
	}
	// ibnetdiscover's comment: "# ["desc"] lid L WxSPEED"; on a CA also
	// the port's own "lid L lmc M" before the remote's description.
	if c := strings.IndexByte(rest, '#'); c >= 0 {
		com := rest[c:]
		if n.Type == nodeCA {
			pt.LID, pt.LMC = lidLMC(com)
		}
		// The last "lid" with no quote after it, as ibsim's regex takes.
		if i := strings.LastIndex(com, "lid "); i >= 0 && !strings.Contains(com[i:], "\"") {
			f := strings.Fields(com[i+4:])
			if len(f) >= 2 {
				if w, sp, ok := strings.Cut(f[1], "x"); ok {
					switch w {
					case "1":
						pt.WidthEnabled = width1x
					case "2":
						pt.WidthEnabled = width2x
					case "4":
						pt.WidthEnabled = width1x | width4x
					case "8":
						pt.WidthEnabled = width8x
					case "12":
						pt.WidthEnabled = width1x | width4x | width12x
					}
					// ibsim takes any prefix of a name ("Q" is QDR); FDR
					// and faster enable SDR to QDR and the extended speeds
					// up to theirs.
					for _, sd := range speedNames {
						if sp != "" && strings.HasPrefix(sd.name, sp) {
							pt.SpeedEnabled, pt.ExtSpeedEnabled = sd.speed, sd.ext
							break
						}
					}
				}
			}
		}
	}
	return nil
}

// connect checks every link: the remote node exists, has that port, and
// lists the link back.
func (p *topoParser) connect() error {
	for _, n := range p.t.Nodes {
		for i := 1; i < len(n.Ports); i++ {
			pt := &n.Ports[i]
			if pt.Remote == "" {
				continue
			}
			r, ok := p.byID[pt.Remote]
			if !ok {
				return fmt.Errorf("%w: %s:%d: can't find remote node %q connected to %q port %d", ErrTopology, p.name, pt.line, pt.Remote, n.ID, i)
			}
			if pt.RemotePort > r.NumPorts() {
				return fmt.Errorf("%w: %s:%d: bad remote port %d in node %q connected to %q port %d", ErrTopology, p.name, pt.line, pt.RemotePort, r.ID, n.ID, i)
			}
			rp := &r.Ports[pt.RemotePort]
			if rp.Remote != n.ID || rp.RemotePort != i {
				return fmt.Errorf("%w: %s:%d: port %d of %q is not connected back to %q port %d", ErrTopology, p.name, pt.line, pt.RemotePort, r.ID, n.ID, i)
			}
			if r == n && pt.RemotePort == i {
				return fmt.Errorf("%w: %s:%d: port %d of %q is connected to itself", ErrTopology, p.name, pt.line, i, n.ID)
			}
		}
	}
	return nil
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

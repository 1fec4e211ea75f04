package policy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/softrdma/softrdma/wire/mad"
)

// MaxVLArbEntries is the most entries a VL arbitration table has (two
// blocks of 32).
const MaxVLArbEntries = 64

// QoSParams is one set of QoS parameters (the qos_ options, or the
// qos_ca_, qos_swe_, qos_sw0_ or qos_rtr_ ones). A zero field was not
// given: the general set's value applies.
type QoSParams struct {
	MaxVLs       uint8 // qos_max_vls, 1-15; 0 not given
	HighLimit    uint8 // qos_high_limit
	HasHighLimit bool  // qos_high_limit was given
	// VLArbHigh and VLArbLow are qos_vlarb_high and qos_vlarb_low: up to
	// 64 VL:weight entries; nil not given.
	VLArbHigh, VLArbLow []mad.VLArbEntry
	// SL2VL is qos_sl2vl: the VL of SLs 0-15 (15 drops the SL); nil not
	// given.
	SL2VL []uint8
}

// QoS is the QoS policy of an opensm.conf.
type QoS struct {
	// Enabled is the qos option: without it OpenSM leaves SL2VL and VL
	// arbitration as the ports have them, and Port's tables are not
	// meant to be written.
	Enabled bool
	// General is the qos_ set, OpenSM's built-in defaults where the file
	// gives nothing (DefaultQoSParams).
	General QoSParams
	// CA, Switch (switch external ports, qos_swe_), Switch0 (enhanced
	// switch port 0, qos_sw0_) and Router are the per-port-type sets, as
	// given.
	CA, Switch, Switch0, Router QoSParams
	// MaxOpVLs is opensm.conf's max_op_vls: the PortInfo code (1 VL0,
	// 2 VL0-1, 3 VL0-3, 4 VL0-7, 5 VL0-14) of the most VLs a port is set
	// to operate; 0 (not given) means OpenSM's default, 5. As in OpenSM,
	// qos_max_vls does not limit the operational VLs.
	MaxOpVLs uint8
	// PolicyFile is the qos_policy_file option: the qos-policy.conf that
	// ParseQoSPolicy reads (the SA's PathRecord SLs); "" if not given.
	PolicyFile string
}

// DefaultQoSParams returns OpenSM's built-in QoS parameters: 15 VLs, a
// high limit of 0, a high table giving VL0 weight 4, a low table giving
// VL1-14 weight 4 each, and SL i to VL i with SL15 to VL7.
func DefaultQoSParams() QoSParams {
	p := QoSParams{MaxVLs: 15, HasHighLimit: true}
	for v := range 15 {
		w := uint8(0)
		if v == 0 {
			w = 4
		}
		p.VLArbHigh = append(p.VLArbHigh, mad.VLArbEntry{VL: uint8(v), Weight: w})
		p.VLArbLow = append(p.VLArbLow, mad.VLArbEntry{VL: uint8(v), Weight: 4 - w})
	}
	for sl := range 15 {
		p.SL2VL = append(p.SL2VL, uint8(sl))
	}
	p.SL2VL = append(p.SL2VL, 7)
	return p
}

// ParseQoS reads the QoS options of an opensm.conf: lines "name value"
// (or name=value), '#' comments, options that are not QoS ignored. It
// knows max_op_vls (MaxOpVLs, 1 to 5), qos (TRUE or FALSE), qos_policy_file (PolicyFile: the file
// ParseQoSPolicy reads, for the SA's PathRecord SLs), and max_vls, high_limit, vlarb_high,
// vlarb_low and sl2vl after the prefixes qos_, qos_ca_, qos_swe_,
// qos_sw0_ and qos_rtr_. A VL arbitration table is a comma-separated list
// of VL:weight (at most 64; VL 0-14, weight 0-255), an SL2VL table 16 VLs
// (0-15). Any other qos_ option, a bad value or a repeated option is an
// error naming the line, wrapping ErrSyntax.
func ParseQoS(r io.Reader) (*QoS, error) {
	q := &QoS{General: DefaultQoSParams()}
	given := map[string]int{}
	sc := bufio.NewScanner(io.LimitReader(r, maxPolicyBytes+1))
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	n := 0
	read := 0
	for sc.Scan() {
		n++
		read += len(sc.Bytes()) + 1
		if read > maxPolicyBytes+1 {
			return nil, &SyntaxError{File: "qos", Line: n, Msg: fmt.Sprintf("file longer than %d bytes", maxPolicyBytes)}
		}
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value := line, ""
		if i := strings.IndexAny(line, " \t="); i >= 0 {
			name, value = line[:i], strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line[i:]), "="))
		}
		fail := func(format string, a ...any) (*QoS, error) {
			return nil, &SyntaxError{File: "qos", Line: n, Msg: name + ": " + fmt.Sprintf(format, a...)}
		}
		lname := strings.ToLower(name)
		if lname == "max_op_vls" {
			v, err := strconv.ParseUint(value, 0, 8)
			if err != nil || v < 1 || v > 5 {
				return fail("%q: want 1 to 5", value)
			}
			q.MaxOpVLs = uint8(v)
			continue
		}
		if lname != "qos" && !strings.HasPrefix(lname, "qos_") {
			continue
		}
		if lname == "qos_policy_file" {
			q.PolicyFile = value
			continue
		}
		if prev, ok := given[lname]; ok {
			return fail("given again (first on line %d)", prev)
		}
		given[lname] = n
		if lname == "qos" {
			switch strings.ToUpper(value) {
			case "TRUE":
				q.Enabled = true
			case "FALSE":
				q.Enabled = false
			default:
				return fail("%q: want TRUE or FALSE", value)
			}
			continue
		}
		set, field := &q.General, strings.TrimPrefix(lname, "qos_")
		for _, t := range []struct {
			prefix string
			p      *QoSParams
		}{{"ca_", &q.CA}, {"swe_", &q.Switch}, {"sw0_", &q.Switch0}, {"rtr_", &q.Router}} {
			if f, ok := strings.CutPrefix(field, t.prefix); ok {
				set, field = t.p, f
				break
			}
		}
		if value == "" {
			return fail("no value")
		}
		switch field {
		case "max_vls":
			v, err := strconv.ParseUint(value, 0, 8)
			if err != nil || v < 1 || v > 15 {
				return fail("%q: want 1 to 15", value)
			}
			set.MaxVLs = uint8(v)
		case "high_limit":
			v, err := strconv.ParseUint(value, 0, 8)
			if err != nil {
				return fail("%q: want 0 to 255", value)
			}
			set.HighLimit, set.HasHighLimit = uint8(v), true
		case "vlarb_high", "vlarb_low":
			t, err := parseVLArb(value)
			if err != nil {
				return fail("%v", err)
			}
			if field == "vlarb_high" {
				set.VLArbHigh = t
			} else {
				set.VLArbLow = t
			}
		case "sl2vl":
			t, err := parseSL2VL(value)
			if err != nil {
				return fail("%v", err)
			}
			set.SL2VL = t
		default:
			return fail("not a QoS option")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &SyntaxError{File: "qos", Line: n + 1, Msg: err.Error()}
	}
	return q, nil
}

func parseVLArb(s string) ([]mad.VLArbEntry, error) {
	var out []mad.VLArbEntry
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, w, ok := strings.Cut(f, ":")
		vl, err1 := strconv.ParseUint(strings.TrimSpace(v), 0, 8)
		wt, err2 := strconv.ParseUint(strings.TrimSpace(w), 0, 8)
		if !ok || err1 != nil || err2 != nil || vl > 14 {
			return nil, fmt.Errorf("entry %q: want VL:weight, VL 0-14, weight 0-255", f)
		}
		if len(out) == MaxVLArbEntries {
			return nil, fmt.Errorf("more than %d entries", MaxVLArbEntries)
		}
		out = append(out, mad.VLArbEntry{VL: uint8(vl), Weight: uint8(wt)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no entries", s)
	}
	return out, nil
}

func parseSL2VL(s string) ([]uint8, error) {
	var out []uint8
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		vl, err := strconv.ParseUint(f, 0, 8)
		if err != nil || vl > 15 {
			return nil, fmt.Errorf("VL %q: want 0 to 15", f)
		}
		if len(out) == 16 {
			return nil, fmt.Errorf("more than 16 SLs")
		}
		out = append(out, uint8(vl))
	}
	if len(out) != 16 {
		return nil, fmt.Errorf("%d VLs, want one for each of the 16 SLs", len(out))
	}
	return out, nil
}

// Params returns the parameters that apply to port p: its type's set,
// each field not given there taken from the general set (which OpenSM's
// defaults complete).
func (q *QoS) Params(p PortRef) QoSParams {
	if q == nil {
		return DefaultQoSParams()
	}
	var t QoSParams
	switch {
	case p.NodeType == mad.NodeTypeSwitch && p.Port == 0:
		t = q.Switch0
	case p.NodeType == mad.NodeTypeSwitch:
		t = q.Switch
	case p.NodeType == mad.NodeTypeRouter:
		t = q.Router
	default:
		t = q.CA
	}
	g := q.General
	d := DefaultQoSParams()
	pick := func(vals ...QoSParams) QoSParams {
		var r QoSParams
		for i := len(vals) - 1; i >= 0; i-- {
			v := vals[i]
			if v.MaxVLs != 0 {
				r.MaxVLs = v.MaxVLs
			}
			if v.HasHighLimit {
				r.HighLimit, r.HasHighLimit = v.HighLimit, true
			}
			if v.VLArbHigh != nil {
				r.VLArbHigh = v.VLArbHigh
			}
			if v.VLArbLow != nil {
				r.VLArbLow = v.VLArbLow
			}
			if v.SL2VL != nil {
				r.SL2VL = v.SL2VL
			}
		}
		return r
	}
	return pick(t, g, d)
}

// PortQoS is what the SM writes to one port for QoS.
type PortQoS struct {
	// OperationalVLs is the PortInfo code of the VLs the port operates:
	// the most the port's VLCap and max_op_vls (QoS.MaxOpVLs) both allow,
	// as OpenSM's link manager sets it (qos_max_vls does not limit it).
	OperationalVLs uint8
	// HighLimit is PortInfo's VLHighLimit.
	HighLimit uint8
	// SL2VL is the SL-to-VL table: for an end port its own, for a switch
	// port the table of every input port to it (modifier
	// mad.SLToVLModifier(in, port)). VLs the port does not operate are
	// masked into its range as OpenSM does; 15 stays 15 (drop).
	SL2VL mad.SLToVLTable
	// VLArbHigh and VLArbLow are the blocks of the arbitration tables the
	// port holds (its VLArbitrationHighCap and VLArbitrationLowCap
	// entries: none, one block, or two): block i is written with the
	// selector mad.VLArbHighEntries0to31+i (mad.VLArbLowEntries0to31+i).
	// Entries past the capacity are empty (weight 0).
	VLArbHigh, VLArbLow []mad.VLArbTable
}

// vlCount decodes a VLCap/OperationalVLs code: 1 VL0, 2 VL0-1, 3 VL0-3,
// 4 VL0-7, 5 VL0-14.
func vlCount(code uint8) int {
	switch code {
	case 1, 2, 3, 4:
		return 1 << (code - 1)
	case 5:
		return 15
	}
	return 0
}

// Port returns the QoS settings of port p: the parameters of its type
// (Params), fitted to the port's VLCap and arbitration table capacities.
func (q *QoS) Port(p PortRef) PortQoS {
	par := q.Params(p)
	capCode := p.VLCap
	if capCode < 1 || capCode > 5 {
		capCode = 5
	}
	op := capCode
	if q != nil && q.MaxOpVLs >= 1 && q.MaxOpVLs < op {
		op = q.MaxOpVLs
	}
	out := PortQoS{OperationalVLs: op, HighLimit: par.HighLimit}
	mask := uint8(vlCount(op) - 1)
	if op == 5 {
		mask = 15
	}
	for sl, v := range par.SL2VL {
		if v != 15 {
			v &= mask
			if int(v) >= vlCount(op) {
				v = 15
			}
		}
		out.SL2VL.VL[sl] = v
	}
	out.VLArbHigh = arbBlocks(par.VLArbHigh, int(p.VLArbHighCap))
	out.VLArbLow = arbBlocks(par.VLArbLow, int(p.VLArbLowCap))
	return out
}

// arbBlocks lays the first capacity entries of t into blocks of 32.
func arbBlocks(t []mad.VLArbEntry, capacity int) []mad.VLArbTable {
	capacity = min(capacity, MaxVLArbEntries)
	if capacity <= 0 {
		return nil
	}
	out := make([]mad.VLArbTable, (capacity+31)/32)
	for i, e := range t[:min(len(t), capacity)] {
		out[i/32].Entry[i%32] = e
	}
	return out
}

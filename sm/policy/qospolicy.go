package policy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// QoSPolicy is the part of an OpenSM qos-policy.conf that gives a path its
// service level: port groups (by port GUID), QoS levels (by name, with an
// SL), match rules (qos-class, source and destination port groups,
// service IDs and P_Keys leading to a QoS level) and the simplified
// qos-ulps section. (*QoSPolicy).SL applies it to a path.
type QoSPolicy struct {
	rules []qosRule // the match rules, then the ULPs, in file order
	def   int       // the ULPs' default SL, -1 if none
}

// qosRule is one match rule or ULP line: every criterion given must hold.
type qosRule struct {
	line      int
	qosClass  []idRange
	serviceID []idRange
	pkey      []idRange // compared without the membership bit
	src, dst  []idRange // port GUIDs
	either    []idRange // source-target-port-guid: the source or the destination
	sl        uint8
}

// idRange is a closed range of numbers.
type idRange struct{ lo, hi uint64 }

func inRanges(rs []idRange, v uint64) bool {
	for _, r := range rs {
		if v >= r.lo && v <= r.hi {
			return true
		}
	}
	return false
}

// PathQoS is what SL matches a path by.
type PathQoS struct {
	// ServiceID is the path query's service ID, if HasServiceID.
	ServiceID    uint64
	HasServiceID bool
	// QoSClass is the query's QoS class, if HasQoSClass.
	QoSClass    uint16
	HasQoSClass bool
	// PKey is the path's P_Key; Source and Dest the port GUIDs of its ends.
	PKey         uint16
	Source, Dest uint64
}

// SL returns the service level the policy gives a path: the SL of the
// first match rule whose criteria all hold (their QoS level's), else of
// the first ULP line that matches, else the ULPs' default. ok is false if
// nothing applies (the path keeps what it would have had without a
// policy).
func (p *QoSPolicy) SL(q PathQoS) (sl uint8, ok bool) {
	for _, r := range p.rules {
		if r.qosClass != nil && (!q.HasQoSClass || !inRanges(r.qosClass, uint64(q.QoSClass))) {
			continue
		}
		if r.serviceID != nil && (!q.HasServiceID || !inRanges(r.serviceID, q.ServiceID)) {
			continue
		}
		if r.pkey != nil && !inRanges(r.pkey, uint64(q.PKey&0x7fff)) {
			continue
		}
		if r.src != nil && !inRanges(r.src, q.Source) || r.dst != nil && !inRanges(r.dst, q.Dest) {
			continue
		}
		if r.either != nil && !inRanges(r.either, q.Source) && !inRanges(r.either, q.Dest) {
			continue
		}
		return r.sl, true
	}
	if p.def >= 0 {
		return uint8(p.def), true
	}
	return 0, false
}

// Service ID bases of the ULPs qos-ulps names by port number: SDP's, and
// rdma_cm's TCP port space (RDS, iSER).
const (
	sdpServiceBase   = 0x0000000000010000
	rdmaTCPPortSpace = 0x0000000001060000
	ipoibDefaultPKey = 0x7fff
)

// ParseQoSPolicy reads an OpenSM qos-policy.conf: the sections port-groups
// (port-group blocks with name and port-guid lists; use is a comment),
// qos-levels (qos-level blocks with name and sl), qos-match-rules
// (qos-match-rule blocks with qos-class, source, destination, service-id,
// pkey and qos-level-name) and qos-ulps (lines "default : SL" and
// "ULP[, criterion] : SL" for the ULPs any (with service-id, pkey,
// target-port-guid, source-port-guid or source-target-port-guid), sdp and
// rds and iser (with port-num), srp (with target-port-guid) and ipoib
// (with pkey, 0x7fff by default)). Lists are comma-separated numbers or
// ranges lo-hi. What OpenSM has beyond that (qos-setup, port groups by
// name, partition or node type, a level's MTU, rate, packet life or path
// bits, the mpi ULP) is an error naming the line, wrapping ErrSyntax,
// rather than ignored.
func ParseQoSPolicy(r io.Reader) (*QoSPolicy, error) {
	p := &QoSPolicy{def: -1}
	groups := map[string][]idRange{}
	levels := map[string]int{}
	type pendingRule struct {
		qosRule
		src, dst, level string
	}
	var pending []pendingRule
	var ulps []qosRule
	errAt := func(line int, format string, a ...any) error {
		return &SyntaxError{File: "qos-policy", Line: line, Msg: fmt.Sprintf(format, a...)}
	}
	sc := bufio.NewScanner(r)
	var section, block string
	var cur map[string]string
	var curLine int
	ln, read := 0, 0
	for sc.Scan() {
		ln++
		read += len(sc.Bytes()) + 1
		if read > maxPolicyBytes+1 {
			return nil, errAt(ln, "file longer than %d bytes", maxPolicyBytes)
		}
		l := sc.Text()
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		switch {
		case section == "" && (l == "port-groups" || l == "qos-levels" || l == "qos-match-rules" || l == "qos-ulps"):
			section = l
			continue
		case section == "":
			return nil, errAt(ln, "%q outside a section (qos-setup and others are not supported)", l)
		case block == "" && l == "end-"+section:
			section = ""
			continue
		case section == "qos-ulps":
			rule, isDef, err := parseULP(l)
			if err != nil {
				return nil, errAt(ln, "%v", err)
			}
			rule.line = ln
			if isDef {
				p.def = int(rule.sl)
			} else {
				ulps = append(ulps, rule)
			}
			continue
		}
		want := map[string]string{"port-groups": "port-group", "qos-levels": "qos-level", "qos-match-rules": "qos-match-rule"}[section]
		if block == "" {
			if l != want {
				return nil, errAt(ln, "%q in %s, want %s", l, section, want)
			}
			block, cur, curLine = l, map[string]string{}, ln
			continue
		}
		if l == "end-"+block {
			switch block {
			case "port-group":
				name := cur["name"]
				if name == "" {
					return nil, errAt(curLine, "port-group without a name")
				}
				rs, err := ranges(cur["port-guid"], 1<<64-1)
				if err != nil || rs == nil {
					return nil, errAt(curLine, "port-group %s: port-guid: %v", name, err)
				}
				groups[name] = rs
			case "qos-level":
				sl, err := strconv.ParseUint(cur["sl"], 0, 4)
				if cur["name"] == "" || err != nil {
					return nil, errAt(curLine, "qos-level needs a name and an sl (0-15)")
				}
				levels[cur["name"]] = int(sl)
			case "qos-match-rule":
				var pr pendingRule
				var err error
				pr.line = curLine
				for k, max := range map[string]uint64{"qos-class": 0xfff, "service-id": 1<<64 - 1, "pkey": 0x7fff} {
					rs, e := ranges(cur[k], max)
					if e != nil {
						err = fmt.Errorf("%s: %v", k, e)
					}
					switch k {
					case "qos-class":
						pr.qosClass = rs
					case "service-id":
						pr.serviceID = rs
					case "pkey":
						pr.pkey = maskPKeys(rs)
					}
				}
				if err != nil {
					return nil, errAt(curLine, "qos-match-rule: %v", err)
				}
				pr.src, pr.dst, pr.level = cur["source"], cur["destination"], cur["qos-level-name"]
				if pr.level == "" {
					return nil, errAt(curLine, "qos-match-rule without a qos-level-name")
				}
				pending = append(pending, pr)
			}
			block = ""
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, errAt(ln, "%q: want key: value", l)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		allowed := map[string][]string{
			"port-group":     {"name", "use", "port-guid"},
			"qos-level":      {"name", "use", "sl"},
			"qos-match-rule": {"use", "qos-class", "source", "destination", "service-id", "pkey", "qos-level-name"},
		}[block]
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, errAt(ln, "%s %s is not supported", block, k)
		}
		if _, dup := cur[k]; dup {
			return nil, errAt(ln, "%s given twice", k)
		}
		cur[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, errAt(ln+1, "%v", err)
	}
	if section != "" {
		return nil, errAt(ln, "%s not ended", section)
	}
	for _, pr := range pending {
		sl, ok := levels[pr.level]
		if !ok {
			return nil, errAt(pr.line, "no qos-level %s", pr.level)
		}
		r := pr.qosRule
		r.sl = uint8(sl)
		for _, g := range []struct {
			name string
			to   *[]idRange
		}{{pr.src, &r.src}, {pr.dst, &r.dst}} {
			if g.name == "" {
				continue
			}
			for _, n := range strings.Split(g.name, ",") {
				rs, ok := groups[strings.TrimSpace(n)]
				if !ok {
					return nil, errAt(pr.line, "no port-group %s", strings.TrimSpace(n))
				}
				*g.to = append(*g.to, rs...)
			}
		}
		p.rules = append(p.rules, r)
	}
	p.rules = append(p.rules, ulps...)
	return p, nil
}

// maskPKeys drops the membership bit of P_Key ranges.
func maskPKeys(rs []idRange) []idRange {
	for i := range rs {
		rs[i].lo &= 0x7fff
		rs[i].hi &= 0x7fff
	}
	return rs
}

// ranges parses "a, b-c, ..." (nil for ""), each number at most max.
func ranges(s string, max uint64) ([]idRange, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []idRange
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 0, 64)
		if err != nil || a > max {
			return nil, fmt.Errorf("bad number %q", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 0, 64); err != nil || b > max || b < a {
				return nil, fmt.Errorf("bad range %q", f)
			}
		}
		out = append(out, idRange{a, b})
	}
	return out, nil
}

// parseULP parses one qos-ulps line.
func parseULP(l string) (qosRule, bool, error) {
	var r qosRule
	head, slText, ok := strings.Cut(l, ":")
	if !ok {
		return r, false, fmt.Errorf("%q: want ULP[, criterion] : SL", l)
	}
	sl, err := strconv.ParseUint(strings.TrimSpace(slText), 0, 4)
	if err != nil {
		return r, false, fmt.Errorf("bad SL %q", strings.TrimSpace(slText))
	}
	r.sl = uint8(sl)
	ulp, crit, hasCrit := strings.Cut(head, ",")
	ulp = strings.TrimSpace(ulp)
	var key, val string
	if hasCrit {
		crit = strings.TrimSpace(crit)
		i := strings.IndexAny(crit, " \t")
		if i < 0 {
			return r, false, fmt.Errorf("%q: want criterion and value", crit)
		}
		key, val = crit[:i], strings.TrimSpace(crit[i:])
	}
	num := func(max uint64) ([]idRange, error) { return ranges(val, max) }
	shift := func(rs []idRange, base uint64) []idRange {
		for i := range rs {
			rs[i].lo += base
			rs[i].hi += base
		}
		return rs
	}
	bad := func() (qosRule, bool, error) {
		return r, false, fmt.Errorf("ULP %s with %q is not supported", ulp, key)
	}
	switch ulp {
	case "default":
		if hasCrit {
			return bad()
		}
		return r, true, nil
	case "any":
		switch key {
		case "service-id":
			r.serviceID, err = num(1<<64 - 1)
		case "pkey":
			r.pkey, err = num(0xffff)
			r.pkey = maskPKeys(r.pkey)
		case "target-port-guid":
			r.dst, err = num(1<<64 - 1)
		case "source-port-guid":
			r.src, err = num(1<<64 - 1)
		case "source-target-port-guid":
			r.either, err = num(1<<64 - 1)
		default:
			return bad()
		}
	case "sdp", "rds", "iser":
		base := uint64(rdmaTCPPortSpace)
		if ulp == "sdp" {
			base = sdpServiceBase
		}
		switch key {
		case "":
			r.serviceID = []idRange{{base, base + 0xffff}}
		case "port-num":
			var rs []idRange
			rs, err = num(0xffff)
			r.serviceID = shift(rs, base)
		default:
			return bad()
		}
	case "srp":
		if key != "target-port-guid" {
			return bad()
		}
		r.dst, err = num(1<<64 - 1)
	case "ipoib":
		switch key {
		case "":
			r.pkey = []idRange{{ipoibDefaultPKey, ipoibDefaultPKey}}
		case "pkey":
			r.pkey, err = num(0xffff)
			r.pkey = maskPKeys(r.pkey)
		default:
			return bad()
		}
	default:
		return r, false, fmt.Errorf("ULP %q is not supported", ulp)
	}
	if err != nil {
		return r, false, fmt.Errorf("%s %s: %v", ulp, key, err)
	}
	return r, false, nil
}

package sa

// The table records, ClassPortInfo, SMInfoRecord and the other saquery
// query types in the end-to-end test: each saquery variant is run at the
// SA under test and at OpenSM's on Linux ibsim with the same topology, and
// the first record each prints is compared line by line. The lines that
// legitimately differ are named in tableDiffs and normalised there, not
// skipped wholesale.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/fabric"
	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// readTables adds to the snapshot what the SM's sweep reads for the table
// records: SL to VL tables, VL arbitration blocks, GUID tables and the
// P_Key tables of the switches' external ports that enforce partitions.
func readTables(t *testing.T, f *fabric.Fabric, s *sm.Subnet) {
	t.Helper()
	byGUID := map[uint64]*fabric.Node{}
	for _, fn := range f.Nodes() {
		b, err := f.Query(fn, mad.SMAttrNodeInfo, 0)
		if err != nil {
			t.Fatal(err)
		}
		ni, _ := mad.ParseNodeInfo(b)
		byGUID[ni.NodeGUID] = fn
	}
	for _, n := range s.Nodes {
		fn := byGUID[n.Info.NodeGUID]
		for _, p := range n.Ports {
			if p == nil {
				continue
			}
			if n.Switch == nil {
				if b, err := f.Query(fn, mad.SMAttrSLToVLTable, 0); err == nil {
					tbl, _ := mad.ParseSLToVLTable(b)
					p.SL2VL = []mad.SLToVLTable{tbl}
				}
			} else {
				for in := 0; in <= int(n.Info.NumPorts); in++ {
					b, err := f.Query(fn, mad.SMAttrSLToVLTable, mad.SLToVLModifier(uint8(in), uint8(p.Num)))
					if err != nil {
						p.SL2VL = nil
						break
					}
					tbl, _ := mad.ParseSLToVLTable(b)
					p.SL2VL = append(p.SL2VL, tbl)
				}
			}
			for sel := mad.VLArbLowEntries0to31; sel <= mad.VLArbHighEntries32to63; sel++ {
				b, err := f.Query(fn, mad.SMAttrVLArbTable, mad.VLArbModifier(uint8(p.Num), uint16(sel)))
				if err != nil {
					continue // a block past the port's capacity
				}
				tbl, _ := mad.ParseVLArbTable(b)
				if p.VLArb == nil {
					p.VLArb = map[int]mad.VLArbTable{}
				}
				p.VLArb[sel] = tbl
			}
			if n.Switch == nil || p.Num == 0 {
				for blk := 0; blk*8 < max(int(p.Info.GUIDCap), 1); blk++ {
					b, err := f.Query(fn, mad.SMAttrGUIDInfo, uint32(blk))
					if err != nil {
						break
					}
					gi, _ := mad.ParseGUIDInfo(b)
					p.GUIDs = append(p.GUIDs, gi.GUID[:]...)
				}
			} else if n.Switch.PartitionEnforcementCap > 0 && p.Remote != nil {
				if b, err := f.Query(fn, mad.SMAttrPKeyTable, mad.PKeyTableModifier(uint8(p.Num), 0)); err == nil {
					tbl, _ := mad.ParsePKeyTable(b)
					p.PKeys = append([]uint16(nil), tbl.PKey[:]...)
				}
			}
		}
	}
}

// textQuery is one saquery run compared by the text of its first record.
type textQuery struct {
	args   []string
	header string // the line that starts a record ("" : the whole output)
	text   string // the first record as our SA answered
	// want, if set, is a line our SA's record must hold: a field that
	// legitimately differs from OpenSM's, checked against the snapshot.
	want string
}

// recordText returns the first record saquery printed: from the first
// line holding header up to the next such line (or the end).
func recordText(out, header string) string {
	if header == "" {
		return strings.TrimSpace(out)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, header) {
			if in {
				break
			}
			in = true
		}
		if in {
			lines = append(lines, strings.TrimRight(l, " \t"))
		}
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// tableQueries lists the saquery variants, with LIDs of the snapshot
// (OpenSM gives ibsim's fabric the same LIDs: it is the same OpenSM on
// the same topology).
func tableQueries(s *sm.Subnet) []textQuery {
	cas := caPorts(s)
	sw := switches(s)[0]
	ca, ca2 := cas[0], cas[1]
	swLID := sw.Ports[0].LID()
	gid := func(p *sm.Port) string { return gidText(s.Prefix, p.GUID) }
	q := func(header string, args ...string) textQuery { return textQuery{args: args, header: header} }
	vls := func(t mad.SLToVLTable) string {
		var b strings.Builder
		b.WriteString("VL:")
		for _, v := range t.VL {
			fmt.Fprintf(&b, "%2d|", v)
		}
		return b.String()
	}
	arbLine := func(t mad.VLArbTable) string {
		var b strings.Builder
		b.WriteString("Weight:")
		for _, e := range t.Entry[:16] {
			fmt.Fprintf(&b, "%2d|", e.Weight)
		}
		return b.String()
	}
	vlarbCA := q("VLArbTableRecord dump", "VLAR", fmt.Sprintf("%d/%d/1", ca.LID(), ca.Num))
	vlarbCA.want = arbLine(ca.VLArb[mad.VLArbLowEntries0to31])
	vlarbSw := q("VLArbTableRecord dump", "VLAR", fmt.Sprintf("%d/0/3", swLID))
	vlarbSw.want = arbLine(sw.Ports[0].VLArb[mad.VLArbHighEntries0to31])
	sl2vlCA := q("SL2VLTableRecord dump", "SL2VL", fmt.Sprint(ca.LID()))
	sl2vlCA.want = vls(ca.SL2VL[0])
	sl2vlSw := q("SL2VLTableRecord dump", "SL2VL", fmt.Sprintf("%d/1/3", swLID))
	sl2vlSw.want = vls(sw.Ports[3].SL2VL[1])
	return []textQuery{
		sl2vlCA, sl2vlSw,
		vlarbCA, vlarbSw,
		q("PKeyTableRecord dump", "--smkey", "1", "PKTR", fmt.Sprintf("%d/%d/0", ca.LID(), ca.Num)),
		q("PKeyTableRecord dump", "--smkey", "1", "PKTR", fmt.Sprintf("%d/0/0", swLID)),
		q("", "PKTR", fmt.Sprint(ca.LID())), // untrusted: an error, the same error
		q("LFT Record dump", "LFTR", fmt.Sprintf("%d/0", swLID)),
		q("", "LFTR", fmt.Sprintf("%d/9", swLID)), // past LinearFDBTop: none
		q("", "MFTR"), // no group: none
		q("GUIDInfo Record dump", "GIR", fmt.Sprintf("%d/0", ca.LID())),
		q("GUIDInfo Record dump", "GIR", fmt.Sprintf("%d/0", swLID)),
		q("SMInfoRecord dump", "SMIR", fmt.Sprint(s.SMLID)),
		q("", "IIR"), // no subscription: none
		q("", "-S"),  // no service: none
		q("SA ClassPortInfo", "-c"),
		q("PathRecord dump", "--src-to-dst", fmt.Sprintf("%d:%d", ca.LID(), ca2.LID())),
		q("PathRecord dump", "--sgid-to-dgid", gid(ca)+"-"+gid(ca2)),
		q("PathRecord dump", "--sgid-to-dgid", gid(ca)+"-"+gidText(s.Prefix, sw.Ports[0].GUID)),
	}
}

// tableDiffs are the lines that legitimately differ between the two
// answers, each replaced by a placeholder in both before they are
// compared:
//   - ActCount: each SM's own count of its work.
//   - ClassPortInfo's capability masks: softrdma's SA claims only what it
//     implements (GetSet(Notice), UD multicast, MultiPathRecord), OpenSM more (optional
//     records, port-capability matching, CapabilityMask2's alias GUIDs,
//     multicast ServiceRecords ...); and the response time (OpenSM's from
//     its transaction timeout, softrdma's 0x12).
//   - mtu of paths: ibsim's ports have MTU 2048, softrdma's fabric 4096.
//   - the VLs of SL to VL tables: ibsim's ports map every SL to VL 0,
//     softrdma's fabric SL i to VL i mod 8 (askTables checks ours
//     against the fabric's tables); likewise the VLs and weights of VL
//     arbitration tables, ibsim's all zero, softrdma's fabric's weight 4
//     for each data VL.
var tableDiffs = []*regexp.Regexp{
	regexp.MustCompile(`(ActCount\.+)\d+`),
	regexp.MustCompile(`(Capability mask\.+)\S+`),
	regexp.MustCompile(`(Capability mask 2\.+)\S+`),
	regexp.MustCompile(`(Response time value\.+)\S+`),
	regexp.MustCompile(`(mtu\.+)\S+`),
	regexp.MustCompile(`(\sVL: )[0-9| ]+`),
	regexp.MustCompile(`(VL    : |Weight: )[0-9| ]+`),
}

func normalise(s string) string {
	for _, re := range tableDiffs {
		s = re.ReplaceAllString(s, "${1}<differs>")
	}
	return s
}

// askTables runs every table query at our SA.
func askTables(t *testing.T, sock, host string, s *sm.Subnet) []textQuery {
	t.Helper()
	qs := tableQueries(s)
	for i := range qs {
		out, err := trySaquery(sock, host, qs[i].args...)
		if err != nil && qs[i].header != "" {
			t.Fatalf("saquery %s: %v\n%s", strings.Join(qs[i].args, " "), err, out)
		}
		qs[i].text = recordText(out, qs[i].header)
		if qs[i].want != "" && !strings.Contains(strings.ReplaceAll(qs[i].text, " ", ""), strings.ReplaceAll(qs[i].want, " ", "")) {
			t.Errorf("saquery %s: no line %q:\n%s", strings.Join(qs[i].args, " "), qs[i].want, qs[i].text)
		}
		if qs[i].header != "" && qs[i].text == "" {
			t.Errorf("saquery %s printed no record:\n%s", strings.Join(qs[i].args, " "), out)
		}
	}
	return qs
}

// compareTables asks OpenSM's SA the same and compares.
func compareTables(t *testing.T, sock, host string, qs []textQuery) {
	t.Helper()
	for _, q := range qs {
		out, _ := trySaquery(sock, host, q.args...)
		want := normalise(recordText(out, q.header))
		got := normalise(q.text)
		if got != want {
			t.Errorf("saquery %s:\n--- our SA:\n%s\n--- OpenSM's:\n%s", strings.Join(q.args, " "), got, want)
		}
	}
	t.Logf("%d saquery variants compared with OpenSM's SA", len(qs))
}

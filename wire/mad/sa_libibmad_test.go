// libibmad's reading of the SA MAD: the RMPP and SA headers and the fields
// of PathRecord and MCMemberRecord that libibmad's table has (saquery and
// OpenSM's tools decode with it), through the Python ctypes decoder of
// smpattr_libibmad_test.go.

package mad

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// saLibFields are libibmad's names of the fields compared here.
var saLibFields = []string{"RmppVers", "RmppType", "RmppResp", "RmppFlags", "RmppStatus", "RmppSegNum",
	"RmppPayload", "RmppNewWin", "SaSMkey", "SaAttrOffs", "SaCompMask", "PathRecDGid", "PathRecSGid",
	"PathRecDLid", "PathRecSLid", "PathRecNumPath", "PathRecSL", "McastMemMGid", "McastMemPortGid",
	"McastMemQkey", "McastMemMLid", "McastMemSL", "McastMemMTU", "McastMemRate", "McastMemTClass",
	"McastMemPkey", "McastMemFlowLbl", "McastMemJoinState", "McastMemProxyJoin"}

func init() {
	// libibmadDecode asks the decoder for the names in libibmadBlocks.
	var m libMap
	for _, n := range saLibFields {
		m = append(m, [2]string{n, n})
	}
	libibmadBlocks["SA (sa_libibmad_test.go)"] = []libMap{m}
}

func TestLibibmadSA(t *testing.T) {
	rm, pr, mc := sampleRMPP(), samplePathRecord(), sampleMCMemberRecord()
	h := SAHeader{SMKey: 0x0102030405060708, AttributeOffset: 8, ComponentMask: 0x0000000180000035}
	b := make([]byte, Size)
	s, _ := NewSAMAD(b, MethodGetTableResp, SAAttrPathRecord, 7, &h)
	s.SetRMPP(&rm)
	whole := bytes.Clone(b)
	pb := make([]byte, PathRecordSize)
	pr.Encode(pb)
	mb := make([]byte, MCMemberRecordSize)
	mc.Encode(mb)
	dec := libibmadDecode(t, [][]byte{whole, pb, mb})
	get := func(fs []libField, name string) []byte {
		for _, f := range fs {
			if f.name == name {
				return f.val
			}
		}
		t.Fatalf("libibmad decoded no %s", name)
		return nil
	}
	num := func(fs []libField, name string) uint64 {
		return binary.LittleEndian.Uint64(append(get(fs, name), make([]byte, 8)...))
	}
	n := 0
	check := func(fs []libField, name string, want uint64) {
		t.Helper()
		if got := num(fs, name); got != want {
			t.Errorf("libibmad's %s = %#x, ours %#x", name, got, want)
		}
		n++
	}
	checkGID := func(fs []libField, name string, want GID) {
		t.Helper()
		got := get(fs, name)
		if !bytes.Equal(append(got, make([]byte, 16)...)[:16], want[:]) {
			t.Errorf("libibmad's %s = %x, ours %x", name, got, want)
		}
		n++
	}
	w := dec[0]
	check(w, "RmppVers", uint64(rm.Version))
	check(w, "RmppType", uint64(rm.Type))
	check(w, "RmppResp", uint64(rm.RRespTime))
	check(w, "RmppFlags", uint64(rm.Flags))
	check(w, "RmppStatus", uint64(rm.Status))
	check(w, "RmppSegNum", uint64(rm.SegmentNumber))
	check(w, "RmppPayload", uint64(rm.Length))
	check(w, "RmppNewWin", uint64(rm.Length))
	check(w, "SaSMkey", h.SMKey)
	check(w, "SaAttrOffs", uint64(h.AttributeOffset))
	check(w, "SaCompMask", h.ComponentMask)
	p := dec[1]
	checkGID(p, "PathRecDGid", pr.DGID)
	checkGID(p, "PathRecSGid", pr.SGID)
	check(p, "PathRecDLid", uint64(pr.DLID))
	check(p, "PathRecSLid", uint64(pr.SLID))
	check(p, "PathRecNumPath", uint64(pr.NumbPath))
	check(p, "PathRecSL", uint64(pr.SL))
	m := dec[2]
	checkGID(m, "McastMemMGid", mc.MGID)
	checkGID(m, "McastMemPortGid", mc.PortGID)
	check(m, "McastMemQkey", uint64(mc.QKey))
	check(m, "McastMemMLid", uint64(mc.MLID))
	check(m, "McastMemSL", uint64(mc.SL))
	check(m, "McastMemMTU", uint64(mc.MTU))
	check(m, "McastMemRate", uint64(mc.Rate))
	check(m, "McastMemTClass", uint64(mc.TClass))
	check(m, "McastMemPkey", uint64(mc.PKey))
	check(m, "McastMemFlowLbl", uint64(mc.FlowLabel))
	check(m, "McastMemJoinState", uint64(mc.JoinState))
	check(m, "McastMemProxyJoin", b2u(mc.ProxyJoin))
	t.Logf("compared %d SA fields with libibmad's decoding", n)
}

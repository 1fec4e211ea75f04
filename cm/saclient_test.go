package cm

import (
	"errors"
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

// saSegment builds segment seg of a GetTableResp carrying payload p (the
// whole table), cut in 200-byte pieces as an SA sends it.
func saSegment(t testing.TB, tid uint64, p []byte, seg, n int, status uint16) mad.SAMAD {
	b := make([]byte, mad.Size)
	s, err := mad.NewSAMAD(b, mad.MethodGetTableResp, mad.SAAttrPathRecord, tid,
		&mad.SAHeader{AttributeOffset: mad.PathRecordSize / 8})
	if err != nil {
		t.Fatal(err)
	}
	s.MAD().SetStatus(status)
	h := mad.RMPPHeader{Version: mad.RMPPVersion, Type: mad.RMPPTypeData, Flags: mad.RMPPFlagActive,
		SegmentNumber: uint32(seg)}
	lo := (seg - 1) * mad.SADataSize
	hi := min(lo+mad.SADataSize, len(p))
	copy(s.Data(), p[lo:hi])
	if seg == 1 {
		h.Flags |= mad.RMPPFlagFirst
		h.Length = uint32(len(p) + n*mad.SAHeaderSize)
	}
	if seg == n {
		h.Flags |= mad.RMPPFlagLast
		h.Length = uint32(hi - lo + mad.SAHeaderSize)
	}
	s.SetRMPP(&h)
	return s
}

func pathTable(n int) []byte {
	var p []byte
	for i := range n {
		r := mad.PathRecord{DLID: uint16(i + 1), SLID: 9, SL: uint8(i % 16), MTU: 4, Rate: 3}
		b := make([]byte, mad.PathRecordSize)
		r.Encode(b)
		p = append(p, b...)
	}
	return p
}

// TestSATableReassembly: a table in 4 segments, one repeated and one out
// of order, is reassembled in order into its records; a bad last-segment
// length and an error status end the query with errors wrapping ErrNoPath.
func TestSATableReassembly(t *testing.T) {
	m := &Manager{}    // no QP: the ACKs go nowhere
	p := pathTable(11) // 704 bytes: 4 segments
	var tab table
	feed := func(seg int) ([]mad.PathRecord, bool, error) {
		return m.saAnswer(Path{}, mad.MethodGetTable, &tab, saSegment(t, 1, p, seg, 4, 0))
	}
	for _, seg := range []int{1, 1, 3, 2, 3} {
		if _, done, err := feed(seg); done || err != nil {
			t.Fatalf("segment %d: done %v err %v", seg, done, err)
		}
	}
	recs, done, err := feed(4)
	if !done || err != nil || len(recs) != 11 {
		t.Fatalf("done %v err %v, %d records", done, err, len(recs))
	}
	for i, r := range recs {
		if r.DLID != uint16(i+1) || r.SLID != 9 || r.MTU != 4 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}

	tab = table{}
	bad := saSegment(t, 1, p[:100], 1, 1, 0)
	h := bad.RMPP()
	h.Length = 5 // less than the SA header
	bad.SetRMPP(&h)
	if _, done, err := m.saAnswer(Path{}, mad.MethodGetTable, &tab, bad); !done || !errors.Is(err, ErrNoPath) {
		t.Fatalf("bad length: done %v err %v", done, err)
	}
	tab = table{}
	_, done, err = m.saAnswer(Path{}, mad.MethodGetTable, &tab, saSegment(t, 1, nil, 1, 1, mad.SAStatusNoRecords))
	var se *SAError
	if !done || !errors.As(err, &se) || se.Status != mad.SAStatusNoRecords || !errors.Is(err, ErrNoPath) {
		t.Fatalf("no records: done %v err %v", done, err)
	}
	// A Get's answer, truncated record area impossible: a whole MAD, but
	// an error status.
	b := make([]byte, mad.Size)
	s, _ := mad.NewSAMAD(b, mad.MethodGetResp, mad.SAAttrPathRecord, 1, &mad.SAHeader{})
	s.MAD().SetStatus(mad.SAStatusReqInvalid)
	if _, done, err := m.saAnswer(Path{}, mad.MethodGet, &table{}, s); !done || !errors.As(err, &se) {
		t.Fatalf("Get error: done %v err %v", done, err)
	}
}

// FuzzSAAnswer feeds arbitrary MADs, as table segments and as a Get's
// answer, to the SA client's answer handling: it must not panic, and
// whatever records it returns come from whole 64-byte records.
func FuzzSAAnswer(f *testing.F) {
	p := pathTable(5)
	for seg := 1; seg <= 2; seg++ {
		f.Add([]byte(saSegment(f, 1, p, seg, 2, 0)))
	}
	f.Add(make([]byte, 3*mad.Size))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &Manager{}
		var tab table
		for len(b) > 0 {
			var mb [mad.Size]byte
			n := copy(mb[:], b)
			b = b[n:]
			_, _, _ = m.saAnswer(Path{}, mad.MethodGet, &table{}, mad.SAMAD(mb[:]))
			recs, done, err := m.saAnswer(Path{}, mad.MethodGetTable, &tab, mad.SAMAD(mb[:]))
			if err == nil && done && len(recs) == 0 {
				t.Fatal("a finished table without records and without an error")
			}
			if done {
				tab = table{}
			}
		}
	})
}

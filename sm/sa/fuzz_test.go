package sa

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/sm"
	"github.com/softrdma/softrdma/wire/mad"
)

// FuzzHandle feeds the SA arbitrary MADs: it must not panic, a request
// gets at most one answer (or starts one transfer), and every answer is a
// response of the SA class to the requester.
func FuzzHandle(f *testing.F) {
	s := topoSubnet(f, "net", 0)
	seed := func(method mad.Method, attr mad.AttributeID, mask uint64, rec []byte) []byte {
		b := make([]byte, mad.Size)
		m, _ := mad.NewSAMAD(b, method, attr, 1, &mad.SAHeader{ComponentMask: mask})
		copy(m.Data(), rec)
		return b
	}
	a := caPorts(s)[0]
	f.Add(seed(mad.MethodGetTable, mad.SAAttrNodeRecord, 0, nil))
	f.Add(seed(mad.MethodGet, mad.SAAttrPathRecord, mad.PathRecCompSLID|mad.PathRecCompDLID,
		pathQuery(mad.PathRecord{SLID: a.LID(), DLID: caPorts(s)[1].LID()})))
	f.Add(seed(mad.MethodSet, mad.SAAttrMCMemberRecord, 0x1ffff, enc(&mad.MCMemberRecord{
		PortGID: mad.MakeGID(testPrefix, a.GUID), JoinState: 1}, mad.MCMemberRecordSize)))
	f.Add(seed(mad.MethodSet, mad.SAAttrServiceRecord, 0x7f, enc(&mad.ServiceRecord{ID: 1,
		GID: mad.MakeGID(testPrefix, a.GUID), Lease: 5}, mad.ServiceRecordSize)))
	f.Add(seed(mad.MethodDelete, mad.SAAttrMCMemberRecord, 0x3, nil))
	f.Add([]byte{1, 3, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := newMemTransport(1, 0)
		srv, err := New(&fixedSource{s: s}, tr, Config{RMPPTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		srv.Handle(&sm.Datagram{SLID: a.LID(), DLID: 1, SQP: 1, DQP: 1, MAD: b})
		if n := len(tr.out); n > 1 {
			t.Fatalf("%d answers", n)
		}
		if len(tr.out) == 1 {
			d := <-tr.out
			m, err := mad.ParseSA(d.MAD)
			if err != nil || !m.MAD().Method().IsResponse() || d.DLID != a.LID() {
				t.Fatalf("answer %v to LID %d: % x", err, d.DLID, d.MAD[:24])
			}
		}
	})
}

// TestConcurrentHandle runs requests, joins and transfers from several
// goroutines at once (for the race detector).
func TestConcurrentHandle(t *testing.T) {
	s := topoSubnet(t, "fattree.ibnetdiscover", 0)
	tr := newMemTransport(1, 0)
	srv, err := New(&fixedSource{s: s}, tr, Config{RMPPTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	cas := caPorts(s)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				p := cas[(g*20+i)%len(cas)]
				b := make([]byte, mad.Size)
				tid := uint64(g<<16 | i)
				switch i % 3 {
				case 0:
					mad.NewSAMAD(b, mad.MethodGetTable, mad.SAAttrPathRecord, tid, &mad.SAHeader{ComponentMask: mad.PathRecCompSLID})
					q := mad.PathRecord{SLID: p.LID()}
					q.Encode(b[mad.SADataOffset:])
				case 1:
					m, _ := mad.NewSAMAD(b, mad.MethodSet, mad.SAAttrMCMemberRecord, tid, &mad.SAHeader{ComponentMask: mad.MCMemberRecCompMGID |
						mad.MCMemberRecCompPortGID | mad.MCMemberRecCompJoinState})
					q := mad.MCMemberRecord{MGID: mad.GID{0xff, 0x12, 15: byte(g)}, PortGID: mad.MakeGID(testPrefix, p.GUID), JoinState: 1}
					q.Encode(m.Data())
				case 2:
					mad.NewSAMAD(b, mad.MethodGetTable, mad.SAAttrMCMemberRecord, tid, &mad.SAHeader{})
				}
				srv.Handle(&sm.Datagram{SLID: p.LID(), SQP: 1, MAD: b})
			}
		}()
	}
	wg.Wait()
	if st := srv.Stats(); st.Requests != 80 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
	if gs := srv.Groups(); len(gs) != 4 {
		t.Errorf("%d groups", len(gs))
	}
	srv.Close()
}

// BenchmarkPathRecord measures a PathRecord Get between two CAs of the
// 32-HCA fat tree: matching, the LFT walks both ways, the answer.
func BenchmarkPathRecord(b *testing.B) {
	s := topoSubnet(b, "fattree.ibnetdiscover", 0)
	tr := newMemTransport(1, 0)
	srv, err := New(&fixedSource{s: s}, tr, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cas := caPorts(s)
	req := make([]byte, mad.Size)
	m, _ := mad.NewSAMAD(req, mad.MethodGet, mad.SAAttrPathRecord, 1, &mad.SAHeader{ComponentMask: mad.PathRecCompSGID | mad.PathRecCompDGID})
	q := mad.PathRecord{SGID: mad.MakeGID(testPrefix, cas[0].GUID), DGID: mad.MakeGID(testPrefix, cas[len(cas)-1].GUID)}
	q.Encode(m.Data())
	d := &sm.Datagram{SLID: cas[0].LID(), SQP: 1, MAD: req}
	b.ReportAllocs()
	for b.Loop() {
		srv.Handle(d)
		<-tr.out
	}
}

// BenchmarkGetTableNodeRecord measures a whole NodeRecord table of the fat
// tree (40 records, 23 segments) through RMPP with a window of 8.
func BenchmarkGetTableNodeRecord(b *testing.B) {
	s := topoSubnet(b, "fattree.ibnetdiscover", 0)
	tr := newMemTransport(1, 0)
	srv, err := New(&fixedSource{s: s}, tr, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	c := newClient(b, srv, tr, caPorts(s)[0].LID())
	c.window = 8
	for b.Loop() {
		if st, recs := c.getTable(mad.SAAttrNodeRecord, 0, nil); st != 0 || len(recs) == 0 {
			b.Fatal(fmt.Sprint(st, len(recs)))
		}
	}
}

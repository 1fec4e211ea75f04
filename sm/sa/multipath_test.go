package sa

import (
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

func TestMultiPathRecord(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 1) // LMC 1: two LIDs a port
	_, _, c := newTestServer(t, s, Config{})
	cas := caPorts(s)
	gid := func(i int) mad.GID { return mad.MakeGID(s.Prefix, cas[i].GUID) }
	q := mad.MultiPathRecord{SGIDs: []mad.GID{gid(0), gid(1)}, DGIDs: []mad.GID{gid(2), gid(3)}}
	mask := uint64(mad.MultiPathRecCompSGIDCount | mad.MultiPathRecCompDGIDCount)
	rec := make([]byte, mad.MultiPathRecordSize)
	q.Encode(rec)

	// One path for each of the four GID pairs, each as a PathRecord query
	// for that pair gives it.
	st, recs := c.getMulti(mask, rec)
	if st != mad.StatusOK || len(recs) != 4 {
		t.Fatalf("GetMulti: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	i := 0
	for _, sg := range q.SGIDs {
		for _, dg := range q.DGIDs {
			got, _ := mad.ParsePathRecord(recs[i])
			i++
			pq := mad.PathRecord{SGID: sg, DGID: dg}
			st, b := c.get(mad.MethodGet, mad.SAAttrPathRecord, mad.PathRecCompSGID|mad.PathRecCompDGID, enc(&pq, mad.PathRecordSize))
			want, _ := mad.ParsePathRecord(b)
			if st != mad.StatusOK || got != want {
				t.Errorf("path %v -> %v: %+v, PathRecord gives %+v", sg, dg, got, want)
			}
		}
	}
	// NumbPath bounds them all: 3 paths, the first pair's two LID pairs
	// first.
	q.NumbPath = 3
	q.Encode(rec)
	st, recs = c.getMulti(mask|mad.MultiPathRecCompNumbPath, rec)
	if st != mad.StatusOK || len(recs) != 3 {
		t.Fatalf("GetMulti NumbPath 3: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	a, _ := mad.ParsePathRecord(recs[0])
	b, _ := mad.ParsePathRecord(recs[1])
	if a.SGID != gid(0) || b.SGID != gid(0) || a.DGID != gid(2) || b.DGID != gid(2) || a.SLID == b.SLID {
		t.Errorf("the first pair's paths: %+v %+v", a, b)
	}
	// An SL the path cannot have, a GID nobody has, no destination,
	// GetMulti of another record, a Get of a MultiPathRecord.
	q.NumbPath, q.SL, q.PKey = 0, 0, 0x1234
	q.Encode(rec)
	if st, recs := c.getMulti(mask|mad.MultiPathRecCompPKey, rec); st != mad.StatusOK || len(recs) != 0 {
		t.Errorf("a P_Key nobody holds: %s, %d records", mad.SAStatusName(st), len(recs))
	}
	q.PKey = 0
	q.DGIDs = []mad.GID{mad.MakeGID(s.Prefix, 0xdead)}
	q.Encode(rec)
	if st, _ := c.getMulti(mask, rec); st != mad.SAStatusReqInvalidGID {
		t.Errorf("an unknown DGID: %s", mad.SAStatusName(st))
	}
	q.DGIDs = nil
	q.Encode(rec)
	if st, _ := c.getMulti(mask, rec); st != mad.SAStatusReqInvalid {
		t.Errorf("no DGID: %s", mad.SAStatusName(st))
	}
	if st, _ := c.get(mad.MethodGet, mad.SAAttrMultiPathRecord, mask, rec); st != mad.StatusMethodAttrInvalid {
		t.Errorf("Get(MultiPathRecord): %s", mad.SAStatusName(st))
	}
	c.request(mad.MethodGetMulti, mad.SAAttrNodeRecord, 0, nil)
	if m := c.recv(); m.MAD().Status() != mad.StatusMethodAttrInvalid {
		t.Errorf("GetMulti(NodeRecord): %#x", m.MAD().Status())
	}
}

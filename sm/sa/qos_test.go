package sa

import (
	"fmt"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/sm/policy"
	"github.com/softrdma/softrdma/wire/mad"
)

// TestPathRecordQoSPolicy: the SL of PathRecords and MultiPathRecord paths
// comes from the QoS policy, by service ID, P_Key and port GUID; a query
// asking for another SL gets no path.
func TestPathRecordQoSPolicy(t *testing.T) {
	s := topoSubnet(t, "net.2sw2path4hca", 0)
	cas := caPorts(s)
	cas[3].PKeys = []uint16{0xffff, 0x8005}
	cas[0].PKeys = []uint16{0xffff, 0x8005}
	pol, err := policy.ParseQoSPolicy(strings.NewReader(fmt.Sprintf(`
qos-ulps
    default                               : 1
    rds, port-num 18634                   : 4
    any, pkey 0x8005                      : 5
    srp, target-port-guid %#x             : 6
end-qos-ulps
`, cas[2].GUID)))
	if err != nil {
		t.Fatal(err)
	}
	_, _, c := newTestServer(t, s, Config{QoSPolicy: pol})
	path := func(mask uint64, q mad.PathRecord) (uint16, mad.PathRecord) {
		t.Helper()
		q.SGID = mad.MakeGID(s.Prefix, cas[0].GUID)
		st, b := c.get(mad.MethodGet, mad.SAAttrPathRecord, mask|mad.PathRecCompSGID|mad.PathRecCompDGID, enc(&q, mad.PathRecordSize))
		r, _ := mad.ParsePathRecord(b)
		return st, r
	}
	gid := func(i int) mad.GID { return mad.MakeGID(s.Prefix, cas[i].GUID) }
	for _, c := range []struct {
		name string
		mask uint64
		q    mad.PathRecord
		sl   uint8
	}{
		{"default", 0, mad.PathRecord{DGID: gid(1)}, 1},
		{"RDS service ID", mad.PathRecCompServiceID, mad.PathRecord{DGID: gid(1), ServiceID: 0x0000000001060000 + 18634}, 4},
		{"another TCP port: default", mad.PathRecCompServiceID, mad.PathRecord{DGID: gid(1), ServiceID: 0x0000000001060000 + 18635}, 1},
		{"P_Key 0x8005", mad.PathRecCompPKey, mad.PathRecord{DGID: gid(3), PKey: 0x8005}, 5},
		{"SRP target", 0, mad.PathRecord{DGID: gid(2)}, 6},
		{"asked for the SL the policy gives", mad.PathRecCompSL, mad.PathRecord{DGID: gid(2), SL: 6}, 6},
	} {
		st, r := path(c.mask, c.q)
		if st != mad.StatusOK || r.SL != c.sl {
			t.Errorf("%s: %s, SL %d, want %d", c.name, mad.SAStatusName(st), r.SL, c.sl)
		}
	}
	if st, _ := path(mad.PathRecCompSL, mad.PathRecord{DGID: gid(2), SL: 3}); st != mad.SAStatusNoRecords {
		t.Errorf("asked for another SL: %s", mad.SAStatusName(st))
	}
	// MultiPathRecord paths take it too.
	mq := mad.MultiPathRecord{SGIDs: []mad.GID{gid(0)}, DGIDs: []mad.GID{gid(1), gid(2)}}
	rec := make([]byte, mad.MultiPathRecordSize)
	mq.Encode(rec)
	st, recs := c.getMulti(mad.MultiPathRecCompSGIDCount|mad.MultiPathRecCompDGIDCount, rec)
	if st != mad.StatusOK || len(recs) != 2 {
		t.Fatalf("GetMulti: %s, %d", mad.SAStatusName(st), len(recs))
	}
	a, _ := mad.ParsePathRecord(recs[0])
	b, _ := mad.ParsePathRecord(recs[1])
	if a.SL != 1 || b.SL != 6 {
		t.Errorf("MultiPathRecord paths' SLs %d and %d, want 1 and 6", a.SL, b.SL)
	}
}

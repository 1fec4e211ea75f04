package mad_test

import (
	"fmt"

	"github.com/softrdma/softrdma/wire/mad"
)

// A PathRecord query by source and destination LID, as saquery -p or
// librdmacm sends it, and how an SA decides whether a record matches it.
func ExampleMatchComponents() {
	b := make([]byte, mad.Size)
	mask := uint64(mad.PathRecCompSLID | mad.PathRecCompDLID)
	req, _ := mad.NewSAMAD(b, mad.MethodGetTable, mad.SAAttrPathRecord, 0x42, &mad.SAHeader{ComponentMask: mask})
	q := mad.PathRecord{SLID: 3, DLID: 9}
	q.Encode(req.Data())

	query := req.Data()[:mad.PathRecordSize]
	for _, r := range []mad.PathRecord{{SLID: 3, DLID: 9, MTU: mad.MTU2048}, {SLID: 3, DLID: 8}} {
		rec := make([]byte, mad.PathRecordSize)
		r.Encode(rec)
		fmt.Printf("SLID %d DLID %d: %v\n", r.SLID, r.DLID,
			mad.MatchComponents(mad.PathRecordComponents, req.Header().ComponentMask, query, rec))
	}
	// Output:
	// SLID 3 DLID 9: true
	// SLID 3 DLID 8: false
}

// A MultiPathRecord query for paths from one port to two: the GIDs follow
// the fixed fields, sources first.
func ExampleMultiPathRecord() {
	prefix := uint64(0xfe80000000000000)
	q := mad.MultiPathRecord{NumbPath: 2, SGIDs: []mad.GID{mad.MakeGID(prefix, 0x11)},
		DGIDs: []mad.GID{mad.MakeGID(prefix, 0x21), mad.MakeGID(prefix, 0x31)}}
	b := make([]byte, mad.MultiPathRecordSize)
	q.Encode(b)
	back, err := mad.ParseMultiPathRecord(b)
	fmt.Println(b[15], b[16], len(back.DGIDs), back.DGIDs[1].GUID() == 0x31, err)
	// Output:
	// 1 2 2 true <nil>
}

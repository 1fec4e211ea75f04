package cm

import (
	"errors"
	"testing"

	"github.com/softrdma/softrdma/wire/mad"
)

func mcMAD(method mad.Method, status uint16, r *mad.MCMemberRecord) mad.SAMAD {
	b := make([]byte, mad.Size)
	s, _ := mad.NewSAMAD(b, method, mad.SAAttrMCMemberRecord, 1, &mad.SAHeader{})
	s.MAD().SetStatus(status)
	if r != nil {
		r.Encode(s.Data())
	}
	return s
}

// TestMcAnswer: a join's answer (GetResp) and a leave's (DeleteResp) give
// the SA's record; an error status is ErrMcastRefused naming it; another
// method is not the answer.
func TestMcAnswer(t *testing.T) {
	rec := mad.MCMemberRecord{MGID: mad.GID{0xff, 0x12}, MLID: 0xC004, QKey: 0x01234567, SL: 3, MTU: 4, JoinState: mad.JoinFullMember}
	r, done, err := mcAnswer(mad.MethodSet, mcMAD(mad.MethodGetResp, 0, &rec))
	if !done || err != nil || r != rec {
		t.Fatalf("join answer: %+v %v %v", r, done, err)
	}
	if _, done, err := mcAnswer(mad.MethodDelete, mcMAD(mad.MethodDeleteResp, 0, &rec)); !done || err != nil {
		t.Fatalf("leave answer: %v %v", done, err)
	}
	if _, done, _ := mcAnswer(mad.MethodDelete, mcMAD(mad.MethodGetResp, 0, &rec)); done {
		t.Fatal("a GetResp taken as a Delete's answer")
	}
	_, done, err = mcAnswer(mad.MethodSet, mcMAD(mad.MethodGetResp, mad.SAStatusReqInvalid, nil))
	if !done || !errors.Is(err, ErrMcastRefused) || errors.Is(err, ErrNoPath) {
		t.Fatalf("refused join: %v %v", done, err)
	}
	if _, done, _ := mcAnswer(mad.MethodSet, mad.SAMAD(make([]byte, 10))); done {
		t.Fatal("a truncated MAD taken as an answer")
	}
}

// FuzzMcAnswer: arbitrary MADs as the answer to a join and a leave never
// panic; an answer is a record or an error, never both.
func FuzzMcAnswer(f *testing.F) {
	rec := mad.MCMemberRecord{MLID: 0xC000}
	f.Add([]byte(mcMAD(mad.MethodGetResp, 0, &rec)))
	f.Add([]byte(mcMAD(mad.MethodDeleteResp, mad.SAStatusReqInvalid, nil)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range []mad.Method{mad.MethodSet, mad.MethodDelete} {
			r, done, err := mcAnswer(m, mad.SAMAD(b))
			if !done && (err != nil || r != (mad.MCMemberRecord{})) || err != nil && r != (mad.MCMemberRecord{}) {
				t.Fatalf("%v: %+v %v %v", m, r, done, err)
			}
		}
	})
}

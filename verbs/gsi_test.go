package verbs

import (
	"errors"
	"testing"
)

func TestCreateGSIQP(t *testing.T) {
	_, da, _ := newDevicesLoop(t, &pairOpts{})
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := da.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	init := QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if _, err := pd.CreateGSIQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: init.Cap}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("RC GSI QP: %v, want ErrInvalid", err)
	}
	qp, err := pd.CreateGSIQP(init)
	if err != nil {
		t.Fatal(err)
	}
	if qp.QPN() != GSIQPN || qp.Type() != UD {
		t.Fatalf("GSI QP is %v %d", qp.Type(), qp.QPN())
	}
	if _, err := pd.CreateGSIQP(init); !errors.Is(err, ErrBusy) {
		t.Fatalf("second GSI QP: %v, want ErrBusy", err)
	}
	init.Type = UD
	other, err := pd.CreateQP(init)
	if err != nil || other.QPN() < 2 {
		t.Fatalf("ordinary QP after GSI: %v %v", other, err)
	}
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	qp2, err := pd.CreateGSIQP(init)
	if err != nil || qp2.QPN() != GSIQPN {
		t.Fatalf("GSI QP after destroy: %v", err)
	}
}

// The unreliable transports of -c: UC QPs connect as RC ones without the
// reliability attributes; UD QPs need no connection, only an address
// handle for the peer and perftest's Q_Key.

package perftest

import (
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

// connectUC moves a UC QP to RTR and RTS towards r (ctx_modify_qp_to_rtr
// and _rts for UC: path, destination QP and PSNs only).
func (s *side) connectUC(qp *verbs.QP, r, my *Dest) error {
	err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN,
		AH: s.ah(r)},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN)
	if err != nil {
		return fmt.Errorf("QP %#x to RTR: %w", qp.QPN(), err)
	}
	if !s.cfg.Test.BW || !s.cfg.IsServer() || s.cfg.Duplex {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: my.PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
			return fmt.Errorf("QP %#x to RTS: %w", qp.QPN(), err)
		}
	}
	return nil
}

// connectUD moves the UD QPs to RTR and, on a side that sends, to RTS with
// an address handle for the peer's QP.
func (s *side) connectUD() error {
	c := s.cfg
	for i, qp := range s.qps {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState); err != nil {
			return fmt.Errorf("QP %#x to RTR: %w", qp.QPN(), err)
		}
		if c.Test.BW && c.IsServer() {
			continue // the send_bw server only receives
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: s.my[i].PSN}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
			return fmt.Errorf("QP %#x to RTS: %w", qp.QPN(), err)
		}
		ah, err := s.pd.CreateAH(s.ah(&s.rem[i]))
		if err != nil {
			return fmt.Errorf("failed to create AH: %w", err)
		}
		s.ahs = append(s.ahs, ah)
	}
	return nil
}

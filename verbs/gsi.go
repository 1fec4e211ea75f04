// The general services interface (GSI) QP: QP number 1, the UD queue pair
// where management datagrams such as the CM's arrive.

package verbs

import "github.com/softrdma/softrdma/wire"

// GSIQPN is the queue pair number of the general services interface.
const GSIQPN = 1

// GSIQKey is the well-known Q_Key of the GSI QP (IBTA 13.4.6.2).
const GSIQKey = 0x80010000

// CreateGSIQP creates the device's GSI queue pair: a UD QP with QP number 1,
// in the RESET state. It is an ordinary UD QP to the engine; its owner (the
// connection manager) moves it to RTS with Q_Key GSIQKey and P_Key index 0,
// posts receives and sends MADs through it like any UD QP. init.Type must be
// UD or zero. A device has at most one GSI QP: a second call fails with
// ErrBusy until the first is destroyed.
func (pd *PD) CreateGSIQP(init QPInitAttr) (*QP, error) {
	if init.Type != 0 && init.Type != UD {
		return nil, errf(ErrInvalid, "the GSI QP is UD, not %v", init.Type)
	}
	init.Type = UD
	return pd.createQP(init, wire.QPN(GSIQPN))
}

// NumQPs returns how many QPs the device has (the GSI QP included), for
// leak checks and monitoring.
func (d *Device) NumQPs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nQP
}

// Completion timestamps (ibv_create_cq_ex with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and _WALLCLOCK): a CQ created with
// CreateCQEx stamps each completion as it is generated. A CQ created with
// CreateCQ pays one predictable branch per completion and nothing else.

package verbs

import "time"

// WCTimestamps selects the clocks a CQ stamps its completions with
// (the timestamp bits of ibv_create_cq_attr_flags' wc_flags).
type WCTimestamps uint8

// Completion timestamp clocks.
const (
	// WCWithCompletionTimestamp sets WC.Timestamp: the device clock, a
	// monotonic count of nanoseconds (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
	WCWithCompletionTimestamp WCTimestamps = 1 << iota
	// WCWithCompletionTimestampWallclock sets WC.WallclockNS: nanoseconds
	// since the Unix epoch (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK).
	WCWithCompletionTimestampWallclock

	wcTimestampsAll = WCWithCompletionTimestamp | WCWithCompletionTimestampWallclock
)

// Device clock parameters, as ibv_query_device_ex reports them
// (DeviceAttr.CompletionTimestampMask and HCACoreClock).
const (
	// CompletionTimestampMask is the range of WC.Timestamp: it counts up
	// from zero and would wrap after 2^63 ns (292 years).
	CompletionTimestampMask = 1<<63 - 1
	// HCACoreClockKHz is the device clock's frequency in kHz: one tick
	// per nanosecond.
	HCACoreClockKHz = 1000000
)

// clockBase is the origin of the device clock: every device of the process
// shares it, so timestamps of different devices compare.
var clockBase = time.Now()

// DeviceClock returns the device clock now, on the scale of
// WC.Timestamp (ibv_query_rt_values_ex's raw_clock).
func DeviceClock() uint64 { return uint64(time.Since(clockBase)) }

// CQAttr are the extended attributes of a CQ (ibv_cq_init_attr_ex).
type CQAttr struct {
	// Timestamps selects the clocks each completion is stamped with.
	Timestamps WCTimestamps
}

// CreateCQEx creates a completion queue as CreateCQ does, with the
// extended attributes attr (ibv_create_cq_ex). With attr.Timestamps,
// every completion carries the time it was generated: when the device
// queued it, after the work request finished, not when it was polled.
func (d *Device) CreateCQEx(cqe int, ch *CompChannel, attr CQAttr) (*CQ, error) {
	if attr.Timestamps&^wcTimestampsAll != 0 {
		return nil, errf(ErrInvalid, "CQ timestamp flags %#x", uint8(attr.Timestamps))
	}
	cq, err := d.CreateCQ(cqe, ch)
	if err != nil {
		return nil, err
	}
	cq.ts = attr.Timestamps
	return cq, nil
}

// Timestamps returns the clocks the CQ stamps its completions with.
func (cq *CQ) Timestamps() WCTimestamps { return cq.ts }

// stamp sets the timestamps cq was asked for on wc.
func (cq *CQ) stamp(wc *WC) {
	now := time.Now()
	if cq.ts&WCWithCompletionTimestamp != 0 {
		wc.Timestamp = uint64(now.Sub(clockBase))
	}
	if cq.ts&WCWithCompletionTimestampWallclock != 0 {
		wc.WallclockNS = uint64(now.UnixNano())
	}
}

// perftest-style output: the test information block, the address lines,
// and the bw and latency result tables, with perftest's formulas.

package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// ResultLine is perftest's separator.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// Table headers.
const (
	headerBW      = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
	headerBWGbits = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	headerLat     = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
	headerLatDur  = " #bytes        #iterations       t_avg[usec]    tps average\n"
)

// chex formats v as C's "%#0Nx" does: no "0x" prefix for zero, and the
// prefix counted in the width.
func chex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

func (c *Config) bwHeader() string {
	if c.Gbits {
		return headerBWGbits
	}
	return headerBW
}

// testInfo is ctx_print_test_info.
func testInfo(w io.Writer, c *Config, dev string, mtuBytes, gidIndex, outReads int, ib bool) {
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(c.Test.Verb.String() + " ")
	if c.Test.Verb == Atomic {
		b.WriteString(c.Atomic.String() + " ")
	}
	if c.Test.BW {
		if c.Duplex {
			b.WriteString("Bidirectional ")
		}
		if c.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", dev)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", c.NumQPs)
	fmt.Fprintf(&b, " Connection type : %v\t\tUsing SRQ      : OFF\n", c.Conn)
	fmt.Fprintf(&b, " PCIe relax order: Unsupported\n")
	fmt.Fprintf(&b, " ibv_wr* API     : OFF\n")
	if !c.IsServer() || !c.Test.BW || c.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", c.TxDepth)
	}
	if c.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", c.PostList)
	}
	if c.Test.Verb == Send && (c.IsServer() || !c.Test.BW) {
		fmt.Fprintf(&b, " RX depth        : %d\n", c.RxDepth)
	}
	if c.Test.BW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", c.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", mtuBytes)
	if ib {
		fmt.Fprintf(&b, " Link type       : IB\n")
	} else {
		fmt.Fprintf(&b, " Link type       : Ethernet\n")
	}
	if gidIndex >= 0 {
		fmt.Fprintf(&b, " GID index       : %d\n", gidIndex)
	}
	if c.Test.Verb != Read && c.Test.Verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", c.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", outReads)
	}
	if c.RDMACM {
		fmt.Fprintf(&b, " rdma_cm QPs\t : ON\n")
		fmt.Fprintf(&b, " Data ex. method : rdma_cm")
		if c.IsServer() {
			// perftest prints this once the QPs are connected.
			b.WriteString("\n" + ResultLine + " Waiting for client rdma_cm QP to connect\n")
			b.WriteString(" Please run the same command with the IB/RoCE interface IP")
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, " rdma_cm QPs\t : OFF\n")
		fmt.Fprintf(&b, " Data ex. method : Ethernet\n")
	}
	b.WriteString(ResultLine)
	io.WriteString(w, b.String())
}

// printDest is ctx_print_pingpong_data.
func printDest(w io.Writer, side string, v Verb, d *Dest, noGID bool) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, chex(uint64(d.LID), 4), chex(uint64(d.QPN), 6), chex(uint64(d.PSN), 6))
	if v == Read {
		fmt.Fprintf(&b, " OUT %s", chex(uint64(d.OutReads), 4))
	}
	if v == Read || v == Write {
		fmt.Fprintf(&b, " RKey %s VAddr %s", chex(uint64(d.RKey), 8), chex(d.VAddr, 16))
	}
	if !noGID { // perftest prints no GID of an InfiniBand port without -x
		b.WriteString("\n GID: ")
		for i, g := range d.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", g)
		}
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// bwTimes are the timestamps of a bw run: when each message was posted and
// when the completion covering it arrived (zero where none did).
type bwTimes struct {
	posted, completed []time.Duration
	cqMod             int
	// start and end bound the measured interval when there are no
	// per-message times (duration mode, the SEND server).
	start, end time.Duration
	noPeak     bool
}

// bwReport is print_report_bw's computation: the peak is the best
// per-message time over every window from a post to a later completion, the
// average counts all messages over the whole run. MB are 2^20 bytes, Gb are
// 10^9 bits.
func bwReport(size, iters int, t *bwTimes, gbits bool) BWReport {
	unit := float64(1 << 20)
	if gbits {
		unit = 125e6
	}
	r := BWReport{Size: uint64(size), Iters: uint64(iters)}
	var total time.Duration
	if t.noPeak {
		total = t.end - t.start
	} else if iters > 0 {
		total = t.completed[iters-1] - t.posted[0]
	}
	if total <= 0 || iters == 0 {
		return r
	}
	if !t.noPeak {
		best := math.Inf(1)
		n := iters
		for i := 0; i < n; i++ {
			first := ((i+1+t.cqMod-1)/t.cqMod)*t.cqMod - 1
			for j := first; j < n; j += t.cqMod {
				if t.completed[j] == 0 {
					continue
				}
				if d := float64(t.completed[j]-t.posted[i]) / float64(j-i+1); d < best {
					best = d
				}
			}
			if n%t.cqMod != 0 && t.completed[n-1] != 0 {
				if d := float64(t.completed[n-1]-t.posted[i]) / float64(n-i); d < best {
					best = d
				}
			}
		}
		if best > 0 && !math.IsInf(best, 1) {
			r.BWPeak = float64(size) * 1e9 / best / unit
		}
	}
	secs := total.Seconds()
	r.BWAvg = float64(size) * float64(iters) / secs / unit
	r.MsgRate = float64(iters) / secs / 1e6
	return r
}

// printBW is print_full_bw_report.
func printBW(w io.Writer, r BWReport, gbits bool) {
	if gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
}

// LatReport is a latency result in microseconds.
type LatReport struct {
	Size                     int
	Iters                    int
	Min, Max, Typical, Avg   float64
	Stdev, P99, P999         float64
	Duration                 bool    // a -D run: only Avg and TPS are set
	TPS                      float64 // transactions per second (-D)
	measured, tailsDiscarded int
}

// latReport is print_report_lat: the gaps between consecutive posts, over
// rttFactor (2 for ping-pong tests, 1 for READ and atomics), sorted, the two
// largest discarded.
func latReport(size int, posted []time.Duration, rttFactor int) LatReport {
	r := LatReport{Size: size, Iters: len(posted)}
	if len(posted) < minIters {
		return r
	}
	d := make([]float64, len(posted)-1)
	for i := range d {
		d[i] = float64(posted[i+1]-posted[i]) / 1e3 / float64(rttFactor)
	}
	slices.Sort(d)
	n := len(d) - 2
	r.measured, r.tailsDiscarded = n, 2
	if (n-1)%2 != 0 {
		r.Typical = (d[n/2] + d[n/2-1]) / 2
	} else {
		r.Typical = d[n/2]
	}
	var sum float64
	for _, x := range d[:n] {
		sum += x
	}
	r.Avg = sum / float64(n)
	var vs float64
	for _, x := range d[:n] {
		vs += (r.Avg - x) * (r.Avg - x)
	}
	r.Stdev = math.Sqrt(vs / float64(n))
	r.Min, r.Max = d[0], d[n]
	r.P99 = d[int(math.Ceil(float64(n)*0.99))]
	r.P999 = d[int(math.Ceil(float64(n)*0.999))]
	return r
}

// latDurationReport is print_report_lat_duration.
func latDurationReport(size, iters int, sample time.Duration, rttFactor int) LatReport {
	r := LatReport{Size: size, Iters: iters, Duration: true}
	if iters > 0 && sample > 0 {
		r.Avg = float64(sample) / 1e3 / float64(rttFactor) / float64(iters)
		r.TPS = float64(iters) / sample.Seconds()
	}
	return r
}

func printLat(w io.Writer, r LatReport) {
	if r.Duration {
		fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", r.Size, r.Iters, r.Avg, r.TPS)
		return
	}
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

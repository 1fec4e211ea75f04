package perftest

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Verb is the operation a test measures.
type Verb int

// Verbs, in perftest's order.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// String returns perftest's name of the verb.
func (v Verb) String() string { return verbNames[v] }

// Test is one of the eight perftest programs.
type Test struct {
	Verb Verb
	BW   bool // bandwidth test; otherwise latency
}

// Tests by the names softrdma's CLI uses (and perftest's ib_<name>).
var Tests = map[string]Test{
	"write_bw": {Write, true}, "read_bw": {Read, true}, "send_bw": {Send, true}, "atomic_bw": {Atomic, true},
	"write_lat": {Write, false}, "read_lat": {Read, false}, "send_lat": {Send, false}, "atomic_lat": {Atomic, false},
}

// TestNames lists the tests in a stable order.
var TestNames = []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat", "atomic_lat"}

// String returns the test's name, as in Tests.
func (t Test) String() string {
	v := strings.ToLower(strings.TrimPrefix(t.Verb.String(), "RDMA_"))
	if t.BW {
		return v + "_bw"
	}
	return v + "_lat"
}

// AtomicType selects the atomic operation.
type AtomicType int

// Atomic operations (perftest's -A values); FETCH_AND_ADD is the default.
const (
	FetchAndAdd AtomicType = iota
	CmpAndSwap
)

// String returns the -A spelling.
func (a AtomicType) String() string {
	if a == CmpAndSwap {
		return "CMP_AND_SWAP"
	}
	return "FETCH_AND_ADD"
}

// ParseAtomicType parses -A's argument.
func ParseAtomicType(s string) (AtomicType, error) {
	switch s {
	case "CMP_AND_SWAP":
		return CmpAndSwap, nil
	case "FETCH_AND_ADD":
		return FetchAndAdd, nil
	}
	return 0, fmt.Errorf("%w: atomic type %q (choose CMP_AND_SWAP or FETCH_AND_ADD)", ErrUsage, s)
}

// ConnType is the transport of the test QPs (-c).
type ConnType int

// Connection types softrdma runs (perftest's RC, UC, UD).
const (
	RC ConnType = iota
	UC
	UD
)

var connNames = [...]string{"RC", "UC", "UD"}

// String returns the -c spelling.
func (c ConnType) String() string { return connNames[c] }

// ParseConn parses -c's argument for a test of verb v, refusing what
// perftest refuses: UC for READ and atomics, UD for all but SEND.
func ParseConn(s string, v Verb) (ConnType, error) {
	switch s {
	case "RC":
		return RC, nil
	case "UC":
		if v == Read || v == Atomic {
			return 0, fmt.Errorf("%w: UC connection not possible in READ/ATOMIC verbs", ErrUsage)
		}
		return UC, nil
	case "UD":
		if v != Send {
			return 0, fmt.Errorf("%w: UD connection only possible in SEND verb", ErrUsage)
		}
		return UD, nil
	case "XRC", "DC", "SRD", "RawEth":
		return 0, fmt.Errorf("%w: connection type %s is not available on softrdma (RC, UC, UD)", ErrUsage, s)
	}
	return 0, fmt.Errorf("%w: invalid connection type %q: choose from RC, UC, UD", ErrUsage, s)
}

// Output is perftest's --output: the whole report, or only one number.
type Output int

// Report verbosities.
const (
	OutputFull      Output = iota
	OutputBandwidth        // the average bandwidth (bw tests)
	OutputMsgRate          // the message rate in Mpps (bw tests)
	OutputLatency          // the average latency in usec (lat tests)
)

// ParseOutput parses --output's argument.
func ParseOutput(s string) (Output, error) {
	switch s {
	case "bandwidth":
		return OutputBandwidth, nil
	case "message_rate":
		return OutputMsgRate, nil
	case "latency":
		return OutputLatency, nil
	}
	return 0, fmt.Errorf("%w: invalid verbosity level output flag %q: use bandwidth, latency, message_rate", ErrUsage, s)
}

// ErrUsage is wrapped by errors about bad parameters.
var ErrUsage = errors.New("invalid parameter")

// Defaults and limits, as perftest's.
const (
	DefaultPort     = 18515
	defSizeBW       = 65536
	defSizeLat      = 2
	defSizeAtomic   = 8
	defIters        = 1000
	defItersWB      = 5000
	defTxBW         = 128
	defTxLat        = 1
	defRxSend       = 512
	defCQMod        = 100
	MaxSize         = 1 << 23 // -a runs 2..MaxSize
	minIters        = 5
	maxIters        = 100000000
	maxTx           = 15000
	ucMaxRx         = 16000 // receive depth of UC/UD SEND tests at most
	defQKey         = 0x11111111
	udGRH           = 40 // room for the GRH before a UD receive
	maxQPs          = 16384
	cqModSizeLimit  = 8192
	defInlineWrite  = 220
	defInlineSend   = 236
	defInlineSendUD = 188
	timeoutDefault  = 14
)

// Config is one side's parameters. Zero values mean perftest's defaults;
// call Normalize before use.
type Config struct {
	Test Test
	// Server is the server's host for the client; empty for the server.
	Server string
	// Port is the TCP port of the exchange (18515).
	Port int

	Size     int // message size (-s)
	Iters    int // iterations (-n)
	All      bool
	GIDIndex int // -x; negative picks the first IPv4 GID, else 0
	MTU      int // -m in bytes; 0 is the port's active MTU
	Duration time.Duration
	NumQPs   int
	TxDepth  int
	RxDepth  int
	Inline   int // -I; negative means perftest's default for the test
	CQMod    int
	Gbits    bool
	Atomic   AtomicType
	IBPort   int
	Timeout  uint8 // QP timeout exponent (-u)
	// SL is -S/--sl: the service level of the QPs' paths (InfiniBand;
	// RoCE ignores it).
	SL uint8
	// IgnoreCPUFreq is -F: accepted for compatibility (softrdma measures with
	// the monotonic clock, so there is no cpufreq warning to ignore).
	IgnoreCPUFreq bool
	// RDMACM is -R: connect the test QPs with rdma_cm and run the exchange
	// over an rdma_cm-connected QP instead of TCP (Port is then the
	// rdma_cm port, TCP port space).
	RDMACM bool
	// NoPollReceive is --busy-poll=false: write_lat's loop, which polls
	// memory, leaves receiving to the link's reader goroutine instead of
	// calling Device.Poll (the device is opened with
	// verbs.Options.NoPollReceive, so that its CQ polls do the same).
	NoPollReceive bool
	// Events is -e: a loop with nothing to do sleeps until a completion
	// arrives (CQ.Wait) instead of polling. Not with write_lat (it
	// watches memory, not a CQ) or -D.
	Events bool
	// Conn is -c: the test QPs' transport (RC by default).
	Conn ConnType
	// PostList is -l: bw tests post this many work requests per PostSend
	// call (1 by default); the CQ moderation becomes the list's length
	// unless CQMod is set.
	PostList int
	// Output is --output: only the one number asked for is printed.
	Output Output
	// Duplex is -b: in write_bw, read_bw and atomic_bw both sides post
	// (the server's QPs go to RTS too), and each prints the sum of both
	// sides' results.
	Duplex bool

	// Out receives the perftest-style report.
	Out io.Writer
	// Progress, if not nil, is told before each message size runs: the
	// index of the size, how many there are, and the size.
	Progress func(i, n, size int)

	sizeSet    bool
	postListCQ bool // the CQ moderation was set from PostList
	margin     time.Duration
	normalized bool
}

// SetSize records an explicit -s.
func (c *Config) SetSize(n int) { c.Size, c.sizeSet = n, true }

// IsServer reports whether this side is the server.
func (c *Config) IsServer() bool { return c.Server == "" }

// Normalize fills defaults and applies perftest's dependencies between
// parameters. It returns an error wrapping ErrUsage for impossible ones.
func (c *Config) Normalize() error {
	if c.normalized {
		return nil
	}
	if err := c.normalize(); err != nil {
		return err
	}
	c.normalized = true
	return nil
}

func (c *Config) normalize() error {
	t := c.Test
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("%w: port %d (1..65535)", ErrUsage, c.Port)
	}
	if c.IBPort == 0 {
		c.IBPort = 1
	}
	if c.IBPort != 1 {
		return fmt.Errorf("%w: IB port %d (the device has port 1)", ErrUsage, c.IBPort)
	}
	if c.Timeout == 0 {
		c.Timeout = timeoutDefault
	}
	if c.Events && !t.BW && t.Verb == Write {
		return fmt.Errorf("%w: -e: write_lat waits for memory, not for completions", ErrUsage)
	}
	if c.Events && c.Duration > 0 {
		return fmt.Errorf("%w: -e with -D", ErrUsage)
	}
	if !c.sizeSet && c.Size == 0 {
		switch {
		case t.Verb == Atomic:
			c.Size = defSizeAtomic
		case t.BW:
			c.Size = defSizeBW
		default:
			c.Size = defSizeLat
		}
	} else if c.Size < 1 || c.Size > 1<<31-1 {
		return fmt.Errorf("%w: message size %d (1..%d)", ErrUsage, c.Size, 1<<31-1)
	}
	if c.Iters == 0 {
		c.Iters = defIters
		if t.BW && t.Verb == Write {
			c.Iters = defItersWB
		}
	}
	if c.Iters < minIters || c.Iters > maxIters {
		return fmt.Errorf("%w: iterations %d (%d..%d)", ErrUsage, c.Iters, minIters, maxIters)
	}
	if c.NumQPs == 0 {
		c.NumQPs = 1
	}
	if c.NumQPs != 1 && !t.BW {
		return fmt.Errorf("%w: multiple QPs only available on bw tests", ErrUsage)
	}
	if c.NumQPs < 1 || c.NumQPs > maxQPs {
		return fmt.Errorf("%w: number of QPs %d (1..%d)", ErrUsage, c.NumQPs, maxQPs)
	}
	if c.TxDepth == 0 {
		c.TxDepth = defTxLat
		if t.BW {
			c.TxDepth = defTxBW
		}
	}
	if c.TxDepth < 1 || c.TxDepth > maxTx {
		return fmt.Errorf("%w: tx depth %d (1..%d)", ErrUsage, c.TxDepth, maxTx)
	}
	if c.RxDepth == 0 {
		c.RxDepth = 1
		if t.Verb == Send {
			c.RxDepth = defRxSend
			if c.Conn != RC && c.Duration == 0 {
				// perftest: UC and UD have a receive for every message.
				c.RxDepth = min(c.Iters, ucMaxRx)
			}
		}
	}
	if c.Conn == UC && (t.Verb == Read || t.Verb == Atomic) || c.Conn == UD && t.Verb != Send {
		if _, err := ParseConn(c.Conn.String(), t.Verb); err != nil {
			return err
		}
	}
	if c.RDMACM && c.Conn != RC {
		return fmt.Errorf("%w: %v is not supported with rdma_cm (-R) in softrdma", ErrUsage, c.Conn)
	}
	if c.Output != OutputFull {
		if t.BW && c.Output != OutputBandwidth && c.Output != OutputMsgRate {
			return fmt.Errorf("%w: output verbosity level for BW can be: bandwidth, message_rate", ErrUsage)
		}
		if !t.BW && c.Output != OutputLatency {
			return fmt.Errorf("%w: output verbosity level for LAT can be: latency", ErrUsage)
		}
	}
	if c.Duplex {
		switch {
		case !t.BW:
			return fmt.Errorf("%w: -b (bidirectional) is for bw tests", ErrUsage)
		case t.Verb == Send:
			return fmt.Errorf("%w: -b with send_bw is not implemented in softrdma (write_bw, read_bw, atomic_bw)", ErrUsage)
		case c.All || c.Duration > 0 || c.RDMACM:
			return fmt.Errorf("%w: -b with -a, -D or -R is not implemented in softrdma", ErrUsage)
		}
	}
	reqCQMod := c.CQMod != 0
	if c.CQMod == 0 {
		c.CQMod = defCQMod
	}
	if c.Inline > 0 && (t.Verb == Read || t.Verb == Atomic) {
		return fmt.Errorf("%w: inline data is not available on READ/atomic tests", ErrUsage)
	}
	if c.Inline < 0 {
		c.Inline = 0
		if !t.BW {
			switch t.Verb {
			case Write:
				c.Inline = defInlineWrite
			case Send:
				c.Inline = defInlineSend
				if c.Conn == UD {
					c.Inline = defInlineSendUD
				}
			}
		}
	}
	if c.MTU != 0 && c.MTU != 256 && c.MTU != 512 && c.MTU != 1024 && c.MTU != 2048 && c.MTU != 4096 {
		return fmt.Errorf("%w: MTU %d (choose 256, 512, 1024, 2048 or 4096)", ErrUsage, c.MTU)
	}
	if c.Duration < 0 {
		return fmt.Errorf("%w: duration %v", ErrUsage, c.Duration)
	}
	// force_dependecies
	if c.Duration == 0 {
		c.TxDepth = min(c.TxDepth, c.Iters)
		if t.Verb == Send {
			c.RxDepth = min(c.RxDepth, c.Iters)
		}
	}
	if c.Size > cqModSizeLimit && !c.All && c.Conn != UD && !reqCQMod {
		c.CQMod = 1
	}
	c.CQMod = min(c.CQMod, c.TxDepth)
	if c.PostList == 0 {
		c.PostList = 1
	}
	if c.PostList < 1 || c.PostList > maxTx {
		return fmt.Errorf("%w: post list %d (1..%d)", ErrUsage, c.PostList, maxTx)
	}
	if c.PostList > 1 {
		if !t.BW {
			return fmt.Errorf("%w: post list is supported in BW tests only", ErrUsage)
		}
		if c.Duration == 0 && c.Iters%c.PostList != 0 {
			return fmt.Errorf("%w: number of iterations must be a multiple of post list size", ErrUsage)
		}
		if c.PostList > c.TxDepth {
			return fmt.Errorf("%w: post list %d is longer than the send queue (-t %d)", ErrUsage, c.PostList, c.TxDepth)
		}
		if !reqCQMod {
			c.CQMod, c.postListCQ = c.PostList, true
		} else if c.PostList%c.CQMod != 0 {
			return fmt.Errorf("%w: post list size must be a multiple of CQ moderation", ErrUsage)
		}
	}
	if c.All {
		if t.Verb == Atomic {
			return fmt.Errorf("%w: message size cannot be changed for atomic tests", ErrUsage)
		}
		if c.Duration > 0 {
			return fmt.Errorf("%w: duration mode doesn't support running on all sizes", ErrUsage)
		}
		c.Size = MaxSize
	}
	if t.Verb == Atomic && c.Size != defSizeAtomic {
		return fmt.Errorf("%w: message size cannot be changed for atomic tests", ErrUsage)
	}
	if c.Duration > 0 {
		c.Iters = 0
		secs := int(c.Duration / time.Second)
		c.margin = time.Duration(secs/4) * time.Second
		if c.Duration <= 2*c.margin {
			return fmt.Errorf("%w: duration %v too short for margin %v", ErrUsage, c.Duration, c.margin)
		}
	}
	return nil
}

package requester

import (
	"fmt"
	"testing"

	"github.com/softrdma/softrdma/wire"
)

// retirement is one Retire call.
type retirement struct {
	seq uint64
	st  Status
}

// rec is a Sink that records every action and checks the ones it can on
// the spot. Fatal flushes, as the verbs engine does.
type rec struct {
	t           testing.TB
	c           *Core
	pkts        []Packet
	ret         []retirement
	fatal       int
	armAt       int64 // latest ArmRetry deadline
	arms        int
	rnr         int64 // latest WaitRNR delay
	rnrs        int
	budgetWaits int
	counts      [3]int
	placed      map[uint64][]int // seq: offsets placed
	orig        map[uint64]uint64

	locals       []uint64          // Local calls, in order
	failLocal    map[uint64]Status // seq: the status Local returns for it
	failTransmit map[uint64]Status // seq: the status Transmit returns for it
	migrate      int               // Migrate calls
	canMigrate   bool              // what Migrate returns (once: the path is used up)
	failPlace    Status
	failDeliver  Status
	check        func(p *Packet)                           // extra checks on each transmitted packet
	place        func(seq uint64, off int, payload []byte) // extra checks on each placement
}

func newRec(t testing.TB, depth int, cfg Config) *rec {
	r := &rec{t: t, c: new(Core), placed: map[uint64][]int{}, orig: map[uint64]uint64{}}
	r.c.Init(depth, r)
	r.c.Configure(cfg)
	r.c.SetRetry(cfg.RetryCnt)
	r.c.SetRNRRetry(cfg.RNRRetry)
	return r
}

func (r *rec) Transmit(p *Packet) Status {
	if st, ok := r.failTransmit[p.Seq]; ok {
		return st
	}
	if r.check != nil {
		r.check(p)
	}
	r.pkts = append(r.pkts, *p)
	return Success
}

func (r *rec) Place(seq uint64, off int, payload []byte) Status {
	if r.failPlace != Success {
		return r.failPlace
	}
	if r.place != nil {
		r.place(seq, off, payload)
	}
	r.placed[seq] = append(r.placed[seq], off)
	return Success
}

func (r *rec) Deliver(seq uint64, orig uint64) Status {
	if r.failDeliver != Success {
		return r.failDeliver
	}
	if _, dup := r.orig[seq]; dup {
		r.t.Errorf("atomic %d delivered twice", seq)
	}
	r.orig[seq] = orig
	return Success
}

func (r *rec) Retire(seq uint64, st Status) {
	if n := len(r.ret); n > 0 && seq != r.ret[n-1].seq+1 || n == 0 && seq != 0 {
		r.t.Errorf("retired %d after %v: not in posting order", seq, r.ret)
	}
	r.ret = append(r.ret, retirement{seq, st})
}

func (r *rec) Fatal() {
	r.fatal++
	r.c.Flush()
}

func (r *rec) ArmRetry(at, in int64) {
	if at != r.c.now+in {
		r.t.Errorf("ArmRetry(%d, %d) at time %d", at, in, r.c.now)
	}
	r.armAt = at
	r.arms++
}

func (r *rec) WaitRNR(d int64) { r.rnr = d; r.rnrs++ }

func (r *rec) WaitBudget() { r.budgetWaits++ }

func (r *rec) Count(c Counter) { r.counts[c]++ }

func (r *rec) Local(seq uint64) Status {
	r.locals = append(r.locals, seq)
	if st, ok := r.failLocal[seq]; ok {
		return st
	}
	return Success
}

func (r *rec) Migrate() bool {
	r.migrate++
	ok := r.canMigrate
	r.canMigrate = false
	return ok
}

// take returns the packets transmitted since the last take.
func (r *rec) take() []Packet {
	p := r.pkts
	r.pkts = nil
	return p
}

// psns lists the PSNs of pkts.
func psns(pkts []Packet) []wire.PSN {
	out := make([]wire.PSN, len(pkts))
	for i, p := range pkts {
		out[i] = p.PSN
	}
	return out
}

func (r retirement) String() string { return fmt.Sprintf("%d:%v", r.seq, r.st) }

func (s Status) String() string {
	names := [...]string{"Success", "Flushed", "RetryExceeded", "RNRRetryExceeded", "RemoteInvalid",
		"RemoteAccess", "RemoteOperation", "BadResponse", "LocalProtection", "LocalOperation"}
	if int(s) < len(names) {
		return names[s]
	}
	if s == MWBindError {
		return "MWBindError"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

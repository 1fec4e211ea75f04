//go:build capi

package main

/*
#include "srd.h"
*/
import "C"

import (
	"encoding/binary"
	"sync"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// Asynchronous events (ibv_get_async_event). The data device of a
// configured device is shared by every context of the process on it, so
// one goroutine per data device reads its events and hands each to the
// context that made the object it names (a QP, CQ or SRQ the C side
// registered), or, for a port event, to every context on the device.
// Each context queues its events and counts them on its async_fd, an
// eventfd the program reads or polls, as the kernel's async file.

// maxAsyncQueue bounds the events a context holds that the program has
// not read; past it events are dropped and logged, as verbs drops them
// when nobody reads its channel.
const maxAsyncQueue = 4096

// asyncEvent is one event as the C side hands it out: its type and the
// C object (struct ibv_qp, ibv_cq or ibv_srq) or port it names.
type asyncEvent struct {
	typ  verbs.EventType
	obj  unsafe.Pointer
	port int
}

// asyncState is a context's event queue and its eventfd.
type asyncState struct {
	mu      sync.Mutex
	on      bool // between srdgo_async_open and srdgo_async_close
	fd      int
	queue   []asyncEvent
	dropped bool
}

// asyncTarget is the context and C object an engine object's events go to.
type asyncTarget struct {
	ctx  *devContext
	cptr unsafe.Pointer
}

var (
	asyncMu sync.Mutex
	// targets maps the engine's *verbs.QP, *verbs.CQ and *verbs.SRQ to
	// where their events go; entries are added when the C side creates an
	// object and removed before it destroys it.
	targets = map[any]asyncTarget{}
	// asyncCtxs are the contexts of each configured device that take
	// events (every open context has an async_fd).
	asyncCtxs = map[*device]map[*devContext]bool{}
)

func (c *devContext) pushAsync(ev asyncEvent) {
	a := &c.async
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.on {
		return
	}
	if len(a.queue) >= maxAsyncQueue {
		if !a.dropped {
			a.dropped = true
			logger.Warn("async events dropped: the program does not read them", "dev", c.dev.name)
		}
		return
	}
	a.queue = append(a.queue, ev)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := syscall.Write(a.fd, one[:]); err != nil {
		logger.Error("async events: writing the eventfd", "err", err)
	}
}

// watchEvents hands the data device's events out until stop closes.
func watchEvents(d *device, dev *verbs.Device, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-stop:
			return
		case ev := <-dev.Events():
			dispatch(d, ev)
		}
	}
}

func dispatch(d *device, ev verbs.AsyncEvent) {
	var key any
	switch {
	case ev.QP != nil:
		key = ev.QP
	case ev.CQ != nil:
		key = ev.CQ
	case ev.SRQ != nil:
		key = ev.SRQ
	}
	asyncMu.Lock()
	if key == nil {
		ctxs := make([]*devContext, 0, len(asyncCtxs[d]))
		for c := range asyncCtxs[d] {
			ctxs = append(ctxs, c)
		}
		asyncMu.Unlock()
		for _, c := range ctxs {
			c.pushAsync(asyncEvent{typ: ev.Type, port: max(ev.Port, 1)})
		}
		return
	}
	t, ok := targets[key]
	asyncMu.Unlock()
	if !ok {
		// An object made by the library itself (none yet) or destroyed
		// since the engine raised the event.
		logger.Debug("async event for an unknown object dropped", "event", ev.Type.String())
		return
	}
	t.ctx.pushAsync(asyncEvent{typ: ev.Type, obj: t.cptr})
}

// startEvents starts handing out the data device's events; called with
// d.mu held when the data device opens.
func (d *device) startEvents(dev *verbs.Device) {
	d.evStop, d.evDone = make(chan struct{}), make(chan struct{})
	go watchEvents(d, dev, d.evStop, d.evDone)
}

// stopEvents stops it; called with d.mu held before the data device closes.
func (d *device) stopEvents() {
	if d.evStop != nil {
		close(d.evStop)
		<-d.evDone
		d.evStop, d.evDone = nil, nil
	}
}

//export srdgo_async_open
func srdgo_async_open(h C.uintptr_t, fd C.int) {
	c, ok := get[*devContext](h)
	if !ok {
		return
	}
	c.async.mu.Lock()
	c.async.fd, c.async.on = int(fd), true
	c.async.mu.Unlock()
	asyncMu.Lock()
	defer asyncMu.Unlock()
	if asyncCtxs[c.dev] == nil {
		asyncCtxs[c.dev] = map[*devContext]bool{}
	}
	asyncCtxs[c.dev][c] = true
}

// srdgo_async_close stops a context's events before the C side closes
// its async_fd.
//
//export srdgo_async_close
func srdgo_async_close(h C.uintptr_t) {
	c, ok := get[*devContext](h)
	if !ok {
		return
	}
	asyncMu.Lock()
	delete(asyncCtxs[c.dev], c)
	if len(asyncCtxs[c.dev]) == 0 {
		delete(asyncCtxs, c.dev)
	}
	for k, t := range targets {
		if t.ctx == c {
			delete(targets, k)
		}
	}
	asyncMu.Unlock()
	c.async.mu.Lock()
	c.async.on, c.async.queue = false, nil
	c.async.mu.Unlock()
}

// engineObject returns the engine object of a QP, CQ or SRQ handle and
// the context that made it.
func engineObject(h C.uintptr_t) any {
	if q, ok := get[*qp](h); ok {
		return q.qp
	}
	if q, ok := get[*cq](h); ok {
		return q.cq
	}
	if s, ok := get[*srq](h); ok {
		return s.srq
	}
	return nil
}

// srdgo_async_register sends the events of the QP, CQ or SRQ of handle h
// to context ctxh, naming the C object cptr.
//
//export srdgo_async_register
func srdgo_async_register(ctxh, h C.uintptr_t, cptr unsafe.Pointer) {
	c, ok := get[*devContext](ctxh)
	key := engineObject(h)
	if !ok || key == nil {
		return
	}
	asyncMu.Lock()
	targets[key] = asyncTarget{ctx: c, cptr: cptr}
	asyncMu.Unlock()
}

// srdgo_async_forget drops an object's entry before it is destroyed; the
// events already queued for it stay (the program acknowledges them).
//
//export srdgo_async_forget
func srdgo_async_forget(h C.uintptr_t) {
	key := engineObject(h)
	if key == nil {
		return
	}
	asyncMu.Lock()
	delete(targets, key)
	asyncMu.Unlock()
}

// srdgo_async_take takes the context's oldest event: 0, or EAGAIN if
// there is none (the eventfd and the queue disagree only while a close
// races a read).
//
//export srdgo_async_take
func srdgo_async_take(h C.uintptr_t, typ *C.int, obj *unsafe.Pointer, port *C.int) C.int {
	c, ok := get[*devContext](h)
	if !ok {
		return C.EINVAL
	}
	c.async.mu.Lock()
	defer c.async.mu.Unlock()
	if len(c.async.queue) == 0 {
		return C.EAGAIN
	}
	ev := c.async.queue[0]
	c.async.queue = append(c.async.queue[:0], c.async.queue[1:]...)
	*typ, *obj, *port = C.int(ev.typ), ev.obj, C.int(ev.port)
	return 0
}

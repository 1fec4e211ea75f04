// rping -P: a persistent server. It keeps listening and serves each
// connection as it comes, several at once, as rping's thread per
// connection does, until interrupted. The connections' events all arrive
// on the listener's event channel; a router hands each connection its own.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/softrdma/softrdma/rdmacm"
)

// lockedWriter serializes writes of several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// errRouteClosed is what a connection's event queue returns once the
// listener's channel is gone.
var errRouteClosed = errors.New("event channel closed")

// connEvents is one connection's share of the listener's events.
type connEvents chan *rdmacm.Event

// Get returns the connection's next event.
func (q connEvents) Get(ctx context.Context) (*rdmacm.Event, error) {
	select {
	case ev, ok := <-q:
		if !ok {
			return nil, errRouteClosed
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// eventRouter reads a listener's channel: connection requests go to reqs,
// every other event to the queue of the ID it is about.
type eventRouter struct {
	mu     sync.Mutex
	queues map[*rdmacm.ID]connEvents
	reqs   chan *rdmacm.Event
}

func (r *eventRouter) run(ctx context.Context, ch *rdmacm.EventChannel, o *pingOpts) {
	defer close(r.reqs)
	defer func() {
		r.mu.Lock()
		for id, q := range r.queues {
			close(q)
			delete(r.queues, id)
		}
		r.mu.Unlock()
	}()
	for {
		ev, err := ch.Get(ctx)
		if err != nil {
			return
		}
		if ev.Type == rdmacm.EventConnectRequest {
			// The queue exists before the request is handed on, so no
			// event of the new connection is missed.
			r.mu.Lock()
			r.queues[ev.ID] = make(connEvents, 16)
			r.mu.Unlock()
			select {
			case r.reqs <- ev:
			case <-ctx.Done():
				return
			}
			continue
		}
		// The send does not block, so it is made under the lock that
		// drop closes the queue under: never on a closed queue.
		r.mu.Lock()
		q := r.queues[ev.ID]
		sent := false
		if q != nil {
			select {
			case q <- ev:
				sent = true
			default:
			}
		}
		r.mu.Unlock()
		switch {
		case q == nil:
			o.debugf("cma_event type %v for a connection already gone\n", ev.Type)
		case !sent:
			fmt.Fprintf(os.Stderr, "cma event %v dropped: the connection does not take its events\n", ev.Type)
		}
	}
}

func (r *eventRouter) queue(id *rdmacm.ID) connEvents {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queues[id]
}

func (r *eventRouter) drop(id *rdmacm.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q, ok := r.queues[id]; ok {
		close(q)
		delete(r.queues, id)
	}
}

// pingPersistent serves every connection request on ch until ctx ends. A
// connection that fails is reported on stderr, as rping's thread does, and
// the server goes on.
func pingPersistent(ctx context.Context, o *pingOpts, ch *rdmacm.EventChannel) error {
	shared := *o
	shared.out = &lockedWriter{w: o.out} // the connections print at once
	o = &shared
	r := &eventRouter{queues: map[*rdmacm.ID]connEvents{}, reqs: make(chan *rdmacm.Event)}
	rctx, stop := context.WithCancel(ctx)
	routed := make(chan struct{})
	go func() { defer close(routed); r.run(rctx, ch, o) }()
	var wg sync.WaitGroup
	defer func() {
		stop()
		<-routed
		wg.Wait()
	}()
	for ev := range r.reqs {
		q := r.queue(ev.ID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.drop(ev.ID)
			if err := pingServe(ctx, o, ev, q); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "connection from %v: %v\n", ev.ID.PeerAddr(), err)
			}
		}()
	}
	return ctx.Err()
}

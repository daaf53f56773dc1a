package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/cm"
	"github.com/uroce/uroce/mad"
	"github.com/uroce/uroce/stack"
)

// Config are an agent's settings; zero values take the defaults.
type Config struct {
	// ResponseTimeout is the CM response timeout code put in REQs (both
	// of its fields): 4.096 µs × 2^code, the wait before a MAD is
	// resent (default 20, 4.3 s, as rdma_cm).
	ResponseTimeout uint8
	// MaxRetries is the REQ's Max CM Retries (default 15, as rdma_cm).
	MaxRetries uint8
	// TimeWait is how long a released connection's IDs stay reserved
	// (default 100 ms).
	TimeWait time.Duration
	// Backlog bounds the requests a listener holds before Accept takes
	// them (default 128); beyond it they are rejected "no resources".
	Backlog int
}

const (
	// QP1's queues: a burst of connection requests (cmtime's 200 at
	// once) must find receives posted, or its REQs wait for their
	// retransmission; the kernel's MAD layer posts 512.
	sendSlots = 128
	recvSlots = 512
	grhLen    = 40
	recvLen   = grhLen + mad.Len
	recvBit   = 1 << 32
)

// Agent is the CM agent of one device: it owns the device's QP1 and a
// cm.Machine, and runs one goroutine that receives MADs, fires the
// machine's timers and hands its events to the connections and
// listeners waiting on them. Application goroutines call the machine
// under the agent's mutex and transmit what it queued themselves.
type Agent struct {
	dev *stack.Device
	cfg Config
	pd  *stack.PD
	cq  *stack.CQ
	qp1 *stack.QP
	mr  *stack.MR
	buf []byte

	mu        sync.Mutex
	m         *cm.Machine
	waiters   map[cm.ID]*waiter
	listeners map[mad.ServiceID]*Listener
	sidrs     map[cm.ID]chan cm.Event // ResolveUD's waits
	ahs       map[netip.Addr]*stack.AH
	freeSend  []int
	cancel    context.CancelFunc // of the loop's current wait
	closed    bool
	sends     []cm.Send
	events    []cm.Event

	stop context.CancelFunc
	done chan struct{}

	sendDrops atomic.Uint64
}

var (
	agentsMu sync.Mutex
	agents   = map[*stack.Device]*Agent{}
)

// AgentFor returns the device's agent, starting one with the default
// Config on first use. It lives until the device is closed.
func AgentFor(dev *stack.Device) (*Agent, error) {
	agentsMu.Lock()
	defer agentsMu.Unlock()
	if a := agents[dev]; a != nil {
		return a, nil
	}
	return newAgentLocked(dev, Config{})
}

// NewAgent starts the device's agent with cfg; it fails when the device
// has one already (QP1 is taken).
func NewAgent(dev *stack.Device, cfg Config) (*Agent, error) {
	agentsMu.Lock()
	defer agentsMu.Unlock()
	if agents[dev] != nil {
		return nil, fmt.Errorf("cm agent: device has one: %w", stack.ErrBusy)
	}
	return newAgentLocked(dev, cfg)
}

func newAgentLocked(dev *stack.Device, cfg Config) (a *Agent, err error) {
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = 128
	}
	a = &Agent{dev: dev, cfg: cfg, waiters: map[cm.ID]*waiter{}, listeners: map[mad.ServiceID]*Listener{},
		sidrs: map[cm.ID]chan cm.Event{},
		ahs:   map[netip.Addr]*stack.AH{}, done: make(chan struct{})}
	a.m = cm.New(cm.Config{CAGUID: dev.Query().NodeGUID, TimeWait: cfg.TimeWait})
	made := a // the error returns below clear a
	defer func() {
		if err != nil {
			made.release()
		}
	}()
	if a.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	if a.cq, err = dev.CreateCQ(2 * (sendSlots + recvSlots)); err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	a.buf = make([]byte, sendSlots*mad.Len+recvSlots*recvLen)
	if a.mr, err = a.pd.RegisterMR(a.buf, stack.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("cm agent: %w", err)
	}
	a.qp1, err = a.pd.CreateQP(stack.QPInit{Type: stack.UD, GSI: true, SendCQ: a.cq, RecvCQ: a.cq,
		MaxSendWR: sendSlots, MaxRecvWR: recvSlots})
	if err != nil {
		return nil, fmt.Errorf("cm agent: qp1: %w", err)
	}
	if err = a.qp1.ToInit(stack.InitAttr{QKey: stack.GSIQKey}); err == nil {
		if err = a.qp1.ToRTR(stack.RTRAttr{}); err == nil {
			err = a.qp1.ToRTS(stack.RTSAttr{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cm agent: qp1: %w", err)
	}
	for i := 0; i < recvSlots; i++ {
		if err = a.postRecv(i); err != nil {
			return nil, fmt.Errorf("cm agent: %w", err)
		}
	}
	for i := sendSlots - 1; i >= 0; i-- {
		a.freeSend = append(a.freeSend, i)
	}
	ctx, stop := context.WithCancel(context.Background())
	a.stop = stop
	agents[dev] = a
	go a.run(ctx)
	return a, nil
}

// Close stops the agent: its connections are abandoned without
// messages, its QP1 destroyed. Device.Close stops it too.
func (a *Agent) Close() error {
	a.stop()
	<-a.done
	return nil
}

// SendDrops counts MADs not sent for want of a free send buffer (the
// CM's retries make up for them).
func (a *Agent) SendDrops() uint64 { return a.sendDrops.Load() }

// CounterNames are the names of CounterMap's counters;
// cm_connections is a gauge, the others only grow.
var CounterNames = []string{"cm_mads_received", "cm_mads_sent", "cm_mads_resent", "cm_malformed", "cm_not_cm",
	"cm_unsupported", "cm_unknown_connection", "cm_duplicates", "cm_unexpected", "cm_no_listener", "cm_refused",
	"cm_stale", "cm_timeouts", "cm_queue_drops", "cm_send_drops", "cm_connections"}

// CounterMap returns the agent's counters by name, as uroce stat shows
// them: the state machine's, the connections it holds and the MADs it
// could not send.
func (a *Agent) CounterMap() map[string]uint64 {
	a.mu.Lock()
	c, n := a.m.Counters(), a.m.Len()
	a.mu.Unlock()
	v := []uint64{c.Received, c.Sent, c.Resent, c.Malformed, c.NotCM, c.Unsupported, c.UnknownConn, c.Duplicates,
		c.Unexpected, c.NoListener, c.Refused, c.Stale, c.Timeouts, c.QueueDrops, a.sendDrops.Load(), uint64(n)}
	m := make(map[string]uint64, len(CounterNames))
	for i, name := range CounterNames {
		m[name] = v[i]
	}
	return m
}

// Counters returns the state machine's counters.
func (a *Agent) Counters() cm.Counters {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m.Counters()
}

// drainWait bounds how long Conn.Close waits for QP1's sends.
const drainWait = 200 * time.Millisecond

// pendingSends counts the MADs posted on QP1 and not yet completed.
func (a *Agent) pendingSends() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0
	}
	return sendSlots - len(a.freeSend)
}

// drainSends waits, at most d, until every MAD posted on QP1 has
// completed (was handed to the link).
func (a *Agent) drainSends(d time.Duration) {
	deadline := time.Now().Add(d)
	for a.pendingSends() > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

// release destroys what the agent created.
func (a *Agent) release() {
	if a.qp1 != nil {
		a.qp1.Destroy()
	}
	for _, ah := range a.ahs {
		ah.Destroy()
	}
	if a.mr != nil {
		a.mr.Deregister()
	}
	if a.cq != nil {
		a.cq.Destroy()
	}
	if a.pd != nil {
		a.pd.Dealloc()
	}
}

func (a *Agent) postRecv(slot int) error {
	off := uint64(sendSlots*mad.Len + slot*recvLen)
	return a.qp1.PostRecv(&stack.RecvWR{ID: recvBit | uint64(slot), SG: []stack.SGE{a.mr.SGE(off, recvLen)}})
}

func (a *Agent) now() cm.Time { return a.dev.Clock().Now() }

// run is the agent's goroutine: wait for completions or the machine's
// next deadline, feed the machine, dispatch.
func (a *Agent) run(ctx context.Context) {
	defer close(a.done)
	defer func() {
		agentsMu.Lock()
		if agents[a.dev] == a {
			delete(agents, a.dev)
		}
		agentsMu.Unlock()
		a.mu.Lock()
		a.closed = true
		for id, w := range a.waiters {
			w.finish(cm.Event{Type: cm.EventTimeout, ID: id}, stack.ErrClosed)
		}
		for _, l := range a.listeners {
			l.shut()
		}
		for id, ch := range a.sidrs {
			ch <- cm.Event{Type: cm.EventTimeout, ID: id}
		}
		clear(a.sidrs)
		a.mu.Unlock()
		a.release()
	}()
	wcs := make([]stack.WC, 32)
	for {
		a.mu.Lock()
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if d, ok := a.m.Deadline(); ok {
			wctx, cancel = context.WithTimeout(ctx, max(d-a.now(), 0))
		} else {
			wctx, cancel = context.WithCancel(ctx)
		}
		a.cancel = cancel
		a.mu.Unlock()
		err := a.cq.Wait(wctx)
		cancel()
		if ctx.Err() != nil || errors.Is(err, stack.ErrClosed) || errors.Is(err, stack.ErrDestroyed) {
			return
		}
		a.mu.Lock()
		a.cancel = nil
		now := a.now()
		for n := a.cq.Poll(wcs); n > 0; n = a.cq.Poll(wcs) {
			for i := range wcs[:n] {
				a.complete(now, &wcs[i])
			}
		}
		a.m.Tick(now)
		a.flushLocked()
		a.mu.Unlock()
	}
}

// complete handles one completion of QP1.
func (a *Agent) complete(now cm.Time, wc *stack.WC) {
	if wc.ID&recvBit == 0 {
		a.freeSend = append(a.freeSend, int(wc.ID))
		return
	}
	slot := int(wc.ID &^ recvBit)
	if wc.Status == stack.WCSuccess && wc.ByteLen >= recvLen {
		off := sendSlots*mad.Len + slot*recvLen
		b := a.buf[off : off+recvLen]
		from, _ := stack.GRHSource(b)
		a.m.Receive(now, from, b[grhLen:])
	}
	if err := a.postRecv(slot); err != nil {
		return // QP1 is going away
	}
}

// kickLocked makes the loop recompute its deadline.
func (a *Agent) kickLocked() {
	if a.cancel != nil {
		a.cancel()
	}
}

// flushLocked transmits what the machine queued and hands its events
// out; the application calls and the loop both end with it.
func (a *Agent) flushLocked() {
	for {
		a.events = a.m.Events(a.events[:0])
		for i := range a.events {
			a.dispatch(&a.events[i])
		}
		a.sends = a.m.Sends(a.sends[:0])
		for i := range a.sends {
			a.transmit(&a.sends[i])
		}
		if len(a.events) == 0 && len(a.sends) == 0 {
			break
		}
	}
	a.kickLocked()
}

// transmit sends one MAD to QP1 of s.To.
func (a *Agent) transmit(s *cm.Send) {
	if len(a.freeSend) == 0 {
		a.sendDrops.Add(1)
		return
	}
	ah := a.ahs[s.To]
	if ah == nil {
		idx, _, err := sourceGID(a.dev, s.To, netip.Addr{})
		if err == nil {
			ah, err = a.pd.CreateAH(stack.AHAttr{DGID: s.To, SGIDIndex: idx})
		}
		if err != nil {
			a.sendDrops.Add(1)
			return
		}
		if len(a.ahs) >= 256 {
			for k, old := range a.ahs {
				old.Destroy()
				delete(a.ahs, k)
				break
			}
		}
		a.ahs[s.To] = ah
	}
	slot := a.freeSend[len(a.freeSend)-1]
	off := slot * mad.Len
	copy(a.buf[off:off+mad.Len], s.MAD[:])
	err := a.qp1.PostSend(&stack.SendWR{ID: uint64(slot), Op: stack.OpSend, Flags: stack.SendSignaled,
		SG: []stack.SGE{a.mr.SGE(uint64(off), mad.Len)}, AH: ah, RemoteQPN: stack.GSIQPN, RemoteQKey: stack.GSIQKey})
	if err != nil {
		a.sendDrops.Add(1)
		return
	}
	a.freeSend = a.freeSend[:len(a.freeSend)-1]
}

// dispatch acts on one event of the machine.
func (a *Agent) dispatch(e *cm.Event) {
	now := a.now()
	if e.Type == cm.EventRequest {
		a.request(now, e)
		return
	}
	if a.sidrEvent(now, e) {
		return
	}
	w := a.waiters[e.ID]
	if w == nil {
		// Nobody waits: the connection was given up; answer what needs it.
		switch e.Type {
		case cm.EventReply:
			a.m.Reject(now, e.ID, mad.RejConsumer, nil, nil)
		case cm.EventDisconnectRequest:
			a.m.Disconnect(now, e.ID, nil)
		}
		return
	}
	switch e.Type {
	case cm.EventReply:
		// Active side: the QP to RTR and RTS, then the RTU (as
		// rdma_cm does before it reports ESTABLISHED).
		w.rep = *e.REP
		w.priv = e.PrivateData
		if w.manual {
			// The application moves its QP, then calls Establish.
			if !w.gotREP {
				w.gotREP = true
				close(w.replied)
			}
			return
		}
		if err := w.ready(a.dev, cm.QPAttrsFor(true, e.REQ, e.REP)); err != nil {
			a.m.Reject(now, e.ID, mad.RejConsumer, nil, nil)
			w.finish(*e, err)
			return
		}
		a.m.ReadyToUse(now, e.ID, nil)
	case cm.EventEstablished:
		w.established()
	case cm.EventDisconnectRequest:
		// The peer disconnects: flush the QP's work, answer, tell the
		// application.
		if w.qp != nil {
			w.qp.ToErr()
		}
		a.m.Disconnect(now, e.ID, nil)
		w.finish(*e, nil)
		delete(a.waiters, e.ID)
	case cm.EventRejected, cm.EventTimeout, cm.EventDisconnected:
		w.finish(*e, nil)
		delete(a.waiters, e.ID)
	}
}

// request hands a REQ to its listener, or refuses it.
func (a *Agent) request(now cm.Time, e *cm.Event) {
	src, dst, data, ok := parseRequest(e.REQ)
	if !ok || e.REQ.TransportType != mad.TransportRC {
		a.m.Reject(now, e.ID, mad.RejInvalidServiceID, nil, nil)
		return
	}
	l := a.listeners[e.ServiceID]
	if l == nil || (l.addr.IsValid() && l.addr != dst.Addr()) || a.dev.GIDIndex(dst.Addr()) < 0 {
		a.m.Reject(now, e.ID, mad.RejInvalidServiceID, nil, nil)
		return
	}
	r := &ConnRequest{a: a, id: e.ID, req: *e.REQ, peer: e.Peer, Remote: src, Local: dst, PrivateData: data}
	select {
	case l.ch <- r:
		a.waiters[e.ID] = newWaiter(r)
	default:
		a.m.Reject(now, e.ID, mad.RejNoResources, nil, nil)
	}
}

// randPSN draws a starting PSN.
func randPSN() stack.PSN { return stack.PSN(rand.Uint32() & 0xffffff) }

package stack

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// MulticastQPN is the destination QP number of a datagram sent to a
// multicast group (a work request's RemoteQPN, and what a UD QP attached
// to the group receives).
const MulticastQPN = 0xFFFFFF

// MulticastFilter makes the link accept the frames of an Ethernet
// multicast address (a NIC's multicast filter, as rdma_rxe's dev_mc_add
// programs it). The device adds an address when the first group that
// maps to it is attached and deletes it when the last one is detached.
type MulticastFilter interface {
	AddMulticast(mac [6]byte) error
	DelMulticast(mac [6]byte) error
}

// mcGroup is a multicast group and the QPs attached to it.
type mcGroup struct {
	gid netip.Addr
	qps []*QP // never changed once published: attach and detach copy it
}

// mcTable holds a device's groups. Engines read the published map
// without a lock; attach and detach build a new one under mu.
type mcTable struct {
	mu     sync.Mutex
	groups atomic.Pointer[map[[16]byte]*mcGroup]
	total  int             // attachments, all groups
	macs   map[[6]byte]int // groups per Ethernet address in the filter
}

// any reports whether a QP is attached to some group.
func (t *mcTable) any() bool {
	m := t.groups.Load()
	return m != nil && len(*m) > 0
}

// lookup returns the group of the 16-byte GID g, or nil.
func (t *mcTable) lookup(g [16]byte) *mcGroup {
	m := t.groups.Load()
	if m == nil {
		return nil
	}
	return (*m)[g]
}

// MulticastMAC is the Ethernet address IP multicast to group goes to:
// 01:00:5e and the group's low 23 bits for IPv4 (RFC 1112), 33:33 and
// its low 32 bits for IPv6 (RFC 2464).
func MulticastMAC(group netip.Addr) [6]byte {
	group = group.Unmap()
	if group.Is4() {
		a := group.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	a := group.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
}

// mcastGID checks that the QP is UD and that gid names a multicast
// group (an IPv4 multicast address, in its ::ffff: form or plain, or an
// IPv6 one) and returns it as the 16-byte GID packets are matched by.
func (q *QP) mcastGID(op string, gid netip.Addr) ([16]byte, error) {
	if q.init.Type != UD {
		return [16]byte{}, fmt.Errorf("%s: a %v qp: only ud qps join groups: %w", op, q.init.Type, ErrInvalidArg)
	}
	a := gid.WithZone("")
	if !a.IsValid() || !a.Unmap().IsMulticast() {
		return [16]byte{}, fmt.Errorf("%s: gid %v is not a multicast group: %w", op, gid, ErrInvalidArg)
	}
	return a.As16(), nil
}

// AttachMcast attaches the UD QP to the multicast group gid
// (ibv_attach_mcast): datagrams sent to the group (destination QP
// MulticastQPN) are delivered to every QP attached to it whose Q_Key
// they carry. The group is an IPv4 multicast address (as ::ffff:a.b.c.d
// or plain) or an IPv6 one. Attaching a QP twice is not an error. Fails
// with ErrInvalidArg for a QP that is not UD or a GID that is not
// multicast, with ErrNoResources past Limits.MaxMcastGrp,
// MaxMcastQPAttach or MaxTotalMcastQPAttach (rdma_rxe's errors).
func (q *QP) AttachMcast(gid netip.Addr) error {
	g, err := q.mcastGID("attach mcast", gid)
	if err != nil {
		return err
	}
	d := q.dev
	t := &d.mcast
	lim := &d.attr.Limits
	t.mu.Lock()
	defer t.mu.Unlock()
	// Checked under mu: a Destroy that got past it detaches after us.
	q.lock()
	err = q.check("attach mcast")
	q.unlock()
	if err != nil {
		return err
	}
	old := t.groups.Load()
	var cur *mcGroup
	if old != nil {
		cur = (*old)[g]
	}
	if cur != nil && slices.Contains(cur.qps, q) {
		return nil
	}
	switch {
	case cur == nil && old != nil && len(*old) >= lim.MaxMcastGrp:
		return fmt.Errorf("attach mcast: %d groups: %w", lim.MaxMcastGrp, ErrNoResources)
	case cur != nil && len(cur.qps) >= lim.MaxMcastQPAttach:
		return fmt.Errorf("attach mcast: %d qps in group %v: %w", lim.MaxMcastQPAttach, gid, ErrNoResources)
	case t.total >= lim.MaxTotalMcastQPAttach:
		return fmt.Errorf("attach mcast: %d attachments: %w", lim.MaxTotalMcastQPAttach, ErrNoResources)
	}
	ng := &mcGroup{gid: netip.AddrFrom16(g)}
	if cur != nil {
		ng.qps = append(slices.Clip(cur.qps), q)
	} else {
		if err := t.filterAdd(d.cfg.MulticastFilter, MulticastMAC(ng.gid)); err != nil {
			return fmt.Errorf("attach mcast: %v: %w", gid, err)
		}
		ng.qps = []*QP{q}
	}
	t.publish(old, g, ng)
	t.total++
	return nil
}

// DetachMcast detaches the QP from the group gid (ibv_detach_mcast):
// ErrInvalidArg when it is not attached to it.
func (q *QP) DetachMcast(gid netip.Addr) error {
	g, err := q.mcastGID("detach mcast", gid)
	if err != nil {
		return err
	}
	if !q.dev.mcast.detach(q, g) {
		return fmt.Errorf("detach mcast: qp %#x is not attached to %v: %w", q.qpn, gid, ErrInvalidArg)
	}
	return nil
}

// McastGroups returns the groups the QP is attached to.
func (q *QP) McastGroups() []netip.Addr {
	m := q.dev.mcast.groups.Load()
	if m == nil {
		return nil
	}
	var out []netip.Addr
	for _, g := range *m {
		if slices.Contains(g.qps, q) {
			out = append(out, g.gid)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// detachAll detaches a QP being destroyed from every group.
func (q *QP) detachAll() {
	if q.init.Type != UD {
		return
	}
	for _, g := range q.McastGroups() {
		q.dev.mcast.detach(q, g.As16())
	}
}

// detach removes q from group g: false when it was not in it.
func (t *mcTable) detach(q *QP, g [16]byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.groups.Load()
	if old == nil {
		return false
	}
	cur := (*old)[g]
	if cur == nil {
		return false
	}
	i := slices.Index(cur.qps, q)
	if i < 0 {
		return false
	}
	t.total--
	if len(cur.qps) == 1 {
		t.publish(old, g, nil)
		t.filterDel(q.dev.cfg.MulticastFilter, MulticastMAC(cur.gid))
		return true
	}
	ng := &mcGroup{gid: cur.gid, qps: slices.Delete(slices.Clone(cur.qps), i, i+1)}
	t.publish(old, g, ng)
	return true
}

// publish stores a copy of old with group g set to ng (nil: removed).
// Called with mu held.
func (t *mcTable) publish(old *map[[16]byte]*mcGroup, g [16]byte, ng *mcGroup) {
	m := make(map[[16]byte]*mcGroup)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	if ng == nil {
		delete(m, g)
	} else {
		m[g] = ng
	}
	t.groups.Store(&m)
}

// filterAdd counts a group on the Ethernet address mac, adding it to
// the link's filter for the first. Called with mu held.
func (t *mcTable) filterAdd(f MulticastFilter, mac [6]byte) error {
	if t.macs == nil {
		t.macs = make(map[[6]byte]int)
	}
	if t.macs[mac] == 0 && f != nil {
		if err := f.AddMulticast(mac); err != nil {
			return err
		}
	}
	t.macs[mac]++
	return nil
}

// filterDel uncounts a group on mac, deleting it from the filter after
// the last. Called with mu held.
func (t *mcTable) filterDel(f MulticastFilter, mac [6]byte) {
	t.macs[mac]--
	if t.macs[mac] > 0 {
		return
	}
	delete(t.macs, mac)
	if f != nil {
		f.DelMulticast(mac) // the address goes with the interface anyway
	}
}

// inputMcast delivers a UD datagram sent to a multicast group (p, in
// frame f) to the group's QPs that this engine owns, and, unless the
// frame came from another engine (e.steered), hands a copy to each
// other engine that owns some of them.
func (e *engine) inputMcast(f []byte, now Time) {
	p := &e.pkt
	g := e.dev.mcast.lookup(p.DstIP().As16())
	if g == nil {
		e.c.rcvNotOurs++
		return
	}
	delivered := false
	for _, q := range g.qps {
		if q.eng.Load() != e || !q.ready.Load() {
			continue
		}
		if e.cur != q {
			e.releaseCur()
			e.acquire(q)
		}
		if q.destroyed {
			continue
		}
		if !q.q.Receive(now, p) {
			e.c.rcvUnsupported++
			continue
		}
		delivered = true
	}
	if delivered {
		e.c.rcvdPkts++
	}
	if e.steered || len(e.dev.engines) == 1 {
		return
	}
	for _, o := range e.dev.engines {
		if o != e && slices.ContainsFunc(g.qps, func(q *QP) bool { return q.eng.Load() == o }) {
			e.steer(o, f)
		}
	}
}

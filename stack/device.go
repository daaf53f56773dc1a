package stack

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/qp"
)

// DefaultBatch is Config.Batch's default for links given (the pipe),
// DefaultXDPBatch for an interface's AF_XDP queues. Measured side by side
// on a veth pair (copy-mode AF_XDP), 16 frames per call carried RC
// WRITE and READ 64 KiB faster than 64, with fewer needless loss
// probes; in memory, 64 did better (README, "Polling and queues").
const (
	DefaultBatch    = 64
	DefaultXDPBatch = 16
)

// Config describes a device to open.
type Config struct {
	// Interface names a network interface to run on through AF_XDP: its
	// MAC, addresses, MTU and queues are taken from the system and its
	// neighbour table resolves peers. Either Interface or Link/Links.
	Interface string
	// XDPMode is how the steering XDP program attaches to Interface:
	// "auto" (native, falling back to generic; the default), "native"
	// or "generic".
	XDPMode string
	// XDPBind is how the AF_XDP sockets bind: "auto" (zero-copy where
	// the driver offers it, else copy mode; the default), "copy" or
	// "zerocopy" (Open fails where the driver has no zero-copy).
	XDPBind string
	// Queues limits the receive queues of Interface that get an AF_XDP
	// socket and an engine to queues 0 to Queues-1 (0: all of them).
	Queues int
	// WrapLink, when set, wraps each link opened on Interface (queue is
	// its number), for example with fault.Wrap (package link/fault).
	WrapLink func(queue int, l Link) Link

	// Link is the one link queue of the device (a pipe end, or a queue
	// opened elsewhere). Links gives several queues, one engine each.
	Link  Link
	Links []Link

	// MAC is the device's Ethernet address (Link/Links only).
	MAC [6]byte
	// Addrs are the device's IP addresses. Each becomes a GID after the
	// link-local GID derived from MAC, in order: IPv4 addresses as
	// ::ffff:a.b.c.d, then IPv6 addresses, as rdma_rxe orders them.
	Addrs []netip.Addr
	// MTU is the IP MTU; 0 takes the first link's.
	MTU int
	// Neighbors resolves peer IP addresses to MAC addresses for QPs and
	// address handles that give no MAC themselves.
	Neighbors Neighbors
	// ResolveTimeout bounds one neighbour resolution (default 3 s).
	ResolveTimeout time.Duration

	// Clock is the time source of the transport timers (default:
	// monotonic time). Engine goroutines sleep for real time, so a fake
	// clock belongs with Manual.
	Clock Clock
	// Manual starts no engine goroutine: the caller runs the engines
	// with Step, on one goroutine, typically on a FakeClock with
	// NextDeadline telling how far to move it. Simulations use it to be
	// deterministic.
	Manual bool
	// BusyPoll makes engines spin on their links instead of sleeping in
	// Link.Poll when idle: lower latency for a whole CPU per engine.
	BusyPoll bool
	// SocketBusyPoll, when positive, opens the AF_XDP sockets with the
	// kernel's busy polling (xdp.Config.BusyPoll): an engine that polls
	// its link (BusyPoll, or the spin before it sleeps) processes the
	// queue's NAPI context in its own recvfrom(2) instead of waiting for
	// the softirq to fill the RX ring.
	SocketBusyPoll time.Duration
	// XDPRingSize is the number of entries of each AF_XDP ring (fill,
	// completion, RX, TX), a power of two (default xdp.DefaultRingSize).
	// Larger rings get a UMEM of twice as many chunks (xdp.Config.Frames),
	// so that the fill ring holds as many receive buffers as it has entries.
	XDPRingSize int
	// IdleSpin is how long an idle engine keeps polling its link before
	// it sleeps in Link.Poll (negative: not at all). A frame or a post
	// within that time costs no wake-up. By default an engine polls 50
	// µs, yielding to the process's other goroutines; with IdleSpin set
	// it yields the CPU to other processes too (sched_yield), as the
	// daemon needs: its clients, other processes, must run for its
	// engines to have work, and their round trips are longer.
	IdleSpin time.Duration
	// Batch is the number of frames received or transmitted per link
	// call (default DefaultBatch, DefaultXDPBatch on an interface).
	Batch int
	// SendWindow bounds the SEND and WRITE packets an RC QP may have
	// sent and not yet seen acknowledged, in packets of the port's
	// active MTU (qp.Caps.SendWindow gets as many bytes; smaller packets
	// count less, at least 1 KiB each): 0 is qp's adaptive window (48
	// to 256 KiB, shrinking on loss), a negative value leaves only the
	// PSN space as a bound. The window keeps loss recovery short:
	// go-back-N resends everything in flight after a loss, and even a
	// responder that keeps what follows a gap has it all to work
	// through before it acknowledges the missing packet. The A bit is
	// asked for every quarter window, so that ACKs keep it moving.
	SendWindow int
	// ReadWindow bounds the bytes of RDMA READ responses an RC QP has
	// asked for and not yet received, one READ always allowed: 0 is
	// qp.DefaultReadWindow (1 MiB), a negative value leaves only
	// max_rd_atomic as a bound. A software receiver cannot take the
	// responses to 128 large READs at once at the rate a responder
	// sends them, and go-back-N asks for all of them again after a loss.
	ReadWindow int
	// KeepPastGap makes an RC responder keep the SEND and WRITE requests
	// that arrive after a lost one (up to 64 PSNs past it) and execute
	// them once the lost one arrives, as mlx5's out-of-order data
	// placement does when a QP asks for it. A uroce requester then
	// resends the lost packet and a probe, not everything that followed
	// it: under loss between two uroce devices, RC WRITE carries more
	// (1.1 to 1.7 times at 5 % loss in the pipe benchmarks
	// RCWrite64KDrop5Keep and RCWrite64KDrop5, as the README has it). It
	// is not the IBTA's rule, which drops those requests
	// (conform's gap-requests-dropped shows the difference), so it is
	// off by default: uroce then answers as an ordinary go-back-N
	// responder.
	KeepPastGap bool

	// Marking is what the IP headers of RoCE packets carry for the
	// network's congestion control and priorities: DSCP and ECN.
	Marking Marking
	// VLAN, when set (1 to 4094), tags every frame the device sends
	// with this 802.1Q VLAN ID and a priority (PCP): the address
	// handle's SL, or the one its DSCP maps to (Marking.Priorities);
	// CNPs take cnp_802p_prio. Frames are received tagged or not.
	VLAN int
	// DCQCN are the parameters of the congestion control the device's
	// QPs run (package dcqcn): nil takes ConnectX's defaults. NoDCQCN
	// turns the reaction point off: CNPs are counted and ignored.
	DCQCN   *dcqcn.Params
	NoDCQCN bool
	// LinkSpeed is the link's bit rate, which PAUSE and PFC quanta (512
	// bit times each) are timed at: 0 takes the interface's reported
	// speed, or DefaultLinkSpeed.
	LinkSpeed uint64

	// Name is the device name reported by Query (default "uroce0").
	Name string
	// Limits overrides the default device limits where non-zero.
	Limits Limits
	// MulticastFilter makes the link accept the Ethernet addresses of
	// the groups QPs attach to (QP.AttachMcast); nil for links that
	// take every frame. Opening an interface sets it to the
	// interface's multicast list (SIOCADDMULTI).
	MulticastFilter MulticastFilter
}

// Limits are device capacities (a subset of ibv_device_attr).
type Limits struct {
	MaxQP           int // QPs, QP1 excluded
	MaxQPWR         int // work requests per queue
	MaxSGE          int // scatter/gather elements per work request
	MaxInline       int // inline data bytes per work request
	MaxCQE          int // completions per CQ
	MaxMR           int // memory regions
	MaxSRQWR        int // receives per SRQ
	MaxQPRdAtom     int // outstanding READ/atomics per QP as responder
	MaxQPInitRdAtom int // outstanding READ/atomics per QP as requester
	// Multicast (AttachMcast): groups, QPs per group, attachments in
	// all, rdma_rxe's limits by default.
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
}

var defaultLimits = Limits{
	MaxQP:           1 << 17,
	MaxQPWR:         1 << 15,
	MaxSGE:          32,
	MaxInline:       512,
	MaxCQE:          1 << 20,
	MaxMR:           1 << 18,
	MaxSRQWR:        1 << 15,
	MaxQPRdAtom:     128,
	MaxQPInitRdAtom: 128,

	MaxMcastGrp:           8192,
	MaxMcastQPAttach:      56,
	MaxTotalMcastQPAttach: 8192 * 56,
}

// DeviceAttr are a device's and its port's attributes (ibv_device_attr
// and ibv_port_attr).
type DeviceAttr struct {
	Name     string
	NodeGUID uint64 // EUI-64 from the MAC
	Limits
	MaxMRSize    uint64
	MaxPKeys     int
	PortState    string // "ACTIVE"
	MaxMTU       qp.MTU
	ActiveMTU    qp.MTU // path MTU the link carries (rxe's rule)
	LinkMTU      int    // IP MTU of the link
	GIDTableLen  int
	NumQueues    int // engines, one per link queue
	MAC          [6]byte
	TransportVer string // "RoCEv2"
}

// Neighbors resolves IP addresses to Ethernet addresses.
type Neighbors interface {
	Resolve(ctx context.Context, ip netip.Addr) ([6]byte, error)
}

// StaticNeighbors is a fixed neighbour table.
type StaticNeighbors map[netip.Addr][6]byte

// Resolve implements Neighbors.
func (s StaticNeighbors) Resolve(_ context.Context, ip netip.Addr) ([6]byte, error) {
	if mac, ok := s[ip.Unmap()]; ok {
		return mac, nil
	}
	if mac, ok := s[ip]; ok {
		return mac, nil
	}
	return [6]byte{}, fmt.Errorf("resolve %v: %w", ip, ErrNoNeighbor)
}

// interfaceOpener opens Config.Interface: it fills in cfg.Links, MAC,
// Addrs, MTU and Neighbors from the system and returns what to close
// with the device. The Linux AF_XDP support sets it; without it Open on
// an interface fails with ErrUnsupported.
var interfaceOpener func(ctx context.Context, cfg *Config) (io.Closer, error)

// Device is an open RoCE device: the verbs entry point (ibv_context).
// All methods are safe for concurrent use.
type Device struct {
	cfg     Config
	attr    DeviceAttr
	mac     [6]byte
	gids    []netip.Addr
	v4      [][4]byte  // our IPv4 addresses
	v6      [][16]byte // our IPv6 addresses, link-local included
	clock   Clock
	engines []*engine
	closer  io.Closer
	linkBps uint64 // the bit rate pause quanta are timed at (pause.go)

	mrs    mrTable
	qps    qpTable
	mcast  mcTable
	nextPD atomic.Uint32

	closed     atomic.Bool
	closeOnce  sync.Once
	cqOverrun  atomic.Uint64
	backingErr atomic.Uint64 // failed reads of backed regions on verbs goroutines

	retiredMu sync.Mutex
	retired   qp.Counters // counters of destroyed QPs

	cqMu sync.Mutex
	cqs  map[*CQ]struct{}
}

// Open opens a device on cfg.Interface or on cfg.Link(s) and starts one
// engine per link unless cfg.Manual. ctx bounds the opening only. The
// device owns the links: Close closes them.
func Open(ctx context.Context, cfg Config) (*Device, error) {
	var closer io.Closer
	if cfg.Interface != "" {
		if cfg.Link != nil || len(cfg.Links) != 0 {
			return nil, fmt.Errorf("open: both interface and links given: %w", ErrInvalidArg)
		}
		if interfaceOpener == nil {
			return nil, fmt.Errorf("open %s: network interfaces: %w", cfg.Interface, ErrUnsupported)
		}
		c, err := interfaceOpener(ctx, &cfg)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", cfg.Interface, err)
		}
		closer = c
	}
	links := cfg.Links
	if cfg.Link != nil {
		links = append([]Link{cfg.Link}, links...)
	}
	fail := func(err error) (*Device, error) {
		if closer != nil {
			closer.Close()
		}
		return nil, err
	}
	if len(links) == 0 {
		return fail(fmt.Errorf("open: no link: %w", ErrInvalidArg))
	}
	if cfg.MTU == 0 {
		cfg.MTU = links[0].MTU()
	}
	if cfg.MTU < 256+80 {
		return fail(fmt.Errorf("open: mtu %d too small for roce: %w", cfg.MTU, ErrInvalidArg))
	}
	if cfg.MAC == ([6]byte{}) || cfg.MAC[0]&1 != 0 {
		return fail(fmt.Errorf("open: mac %x is not a unicast address: %w", cfg.MAC, ErrInvalidArg))
	}
	if cfg.Clock == nil {
		cfg.Clock = NewMonotonicClock()
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
		if cfg.Interface != "" {
			cfg.Batch = DefaultXDPBatch
		}
	}
	if cfg.ResolveTimeout <= 0 {
		cfg.ResolveTimeout = 3 * time.Second
	}
	if cfg.Name == "" {
		cfg.Name = "uroce0"
	}
	if err := cfg.Marking.check(); err != nil {
		return fail(fmt.Errorf("open: %w", err))
	}
	if cfg.VLAN < 0 || cfg.VLAN > 4094 {
		return fail(fmt.Errorf("open: vlan %d: want 1 to 4094 (0: untagged): %w", cfg.VLAN, ErrInvalidArg))
	}
	if cfg.DCQCN == nil {
		p := dcqcn.Defaults()
		cfg.DCQCN = &p
	} else {
		p := *cfg.DCQCN // the device's own copy: QPs share it
		cfg.DCQCN = &p
	}
	lim := defaultLimits
	mergeLimits(&lim, cfg.Limits)
	d := &Device{cfg: cfg, mac: cfg.MAC, clock: cfg.Clock, closer: closer, linkBps: linkSpeed(&cfg)}
	if err := cfg.DCQCN.ValidateFor(d.linkBps); err != nil {
		return fail(fmt.Errorf("open: dcqcn: %w", err))
	}
	d.mrs.max = lim.MaxMR
	d.qps.init(lim.MaxQP)
	if err := d.buildGIDs(cfg.Addrs); err != nil {
		return fail(fmt.Errorf("open: %w", err))
	}
	d.attr = DeviceAttr{
		Name:         cfg.Name,
		NodeGUID:     binary.BigEndian.Uint64(eui64(cfg.MAC)),
		Limits:       lim,
		MaxMRSize:    1 << 40,
		MaxPKeys:     1,
		PortState:    "ACTIVE",
		MaxMTU:       qp.MTU4096,
		ActiveMTU:    pathMTU(cfg.MTU),
		LinkMTU:      cfg.MTU,
		GIDTableLen:  len(d.gids),
		NumQueues:    len(links),
		MAC:          cfg.MAC,
		TransportVer: "RoCEv2",
	}
	for i, l := range links {
		d.engines = append(d.engines, newEngine(d, i, l))
	}
	if !cfg.Manual {
		for _, e := range d.engines {
			go e.run()
		}
	}
	return d, nil
}

func mergeLimits(dst *Limits, src Limits) {
	set := func(d *int, s int) {
		if s > 0 {
			*d = s
		}
	}
	set(&dst.MaxQP, src.MaxQP)
	set(&dst.MaxQPWR, src.MaxQPWR)
	set(&dst.MaxSGE, src.MaxSGE)
	set(&dst.MaxInline, src.MaxInline)
	set(&dst.MaxCQE, src.MaxCQE)
	set(&dst.MaxMR, src.MaxMR)
	set(&dst.MaxSRQWR, src.MaxSRQWR)
	set(&dst.MaxQPRdAtom, src.MaxQPRdAtom)
	set(&dst.MaxQPInitRdAtom, src.MaxQPInitRdAtom)
	set(&dst.MaxMcastGrp, src.MaxMcastGrp)
	set(&dst.MaxMcastQPAttach, src.MaxMcastQPAttach)
	set(&dst.MaxTotalMcastQPAttach, src.MaxTotalMcastQPAttach)
}

// pathMTU derives the active path MTU from an IP MTU as rdma_rxe does:
// the largest IB MTU that fits after 80 bytes of headers.
func pathMTU(ipMTU int) qp.MTU {
	n := ipMTU - 80
	for m := qp.MTU4096; m >= qp.MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return qp.MTU256
}

// eui64 returns the modified EUI-64 interface identifier of mac.
func eui64(mac [6]byte) []byte {
	return []byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

func (d *Device) buildGIDs(addrs []netip.Addr) error {
	var ll [16]byte
	ll[0], ll[1] = 0xfe, 0x80
	copy(ll[8:], eui64(d.mac))
	d.gids = append(d.gids, netip.AddrFrom16(ll))
	d.v6 = append(d.v6, ll)
	var v6 []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case !a.IsValid() || a.IsUnspecified() || a.IsMulticast():
			return fmt.Errorf("address %v: %w", a, ErrInvalidArg)
		case a.Is4():
			d.gids = append(d.gids, netip.AddrFrom16(a.As16()))
			d.v4 = append(d.v4, a.As4())
		default:
			if a.WithZone("") == d.gids[0] {
				continue
			}
			v6 = append(v6, a.WithZone(""))
		}
	}
	for _, a := range v6 {
		d.gids = append(d.gids, a)
		d.v6 = append(d.v6, a.As16())
	}
	return nil
}

// Query returns the device and port attributes (ibv_query_device,
// ibv_query_port).
func (d *Device) Query() DeviceAttr { return d.attr }

// GIDs returns the GID table: index 0 the link-local GID from the MAC,
// then one GID per address (::ffff:a.b.c.d for IPv4).
func (d *Device) GIDs() []netip.Addr { return append([]netip.Addr(nil), d.gids...) }

// GID returns the GID at index i (ibv_query_gid).
func (d *Device) GID(i int) (netip.Addr, error) {
	if i < 0 || i >= len(d.gids) {
		return netip.Addr{}, fmt.Errorf("query gid %d: %w", i, ErrInvalidArg)
	}
	return d.gids[i], nil
}

// GIDIndex returns the index of the GID of ip (an IPv4 address matches
// its ::ffff: form), or -1.
func (d *Device) GIDIndex(ip netip.Addr) int {
	if ip.Is4() {
		ip = netip.AddrFrom16(ip.As16())
	}
	for i, g := range d.gids {
		if g == ip.WithZone("") {
			return i
		}
	}
	return -1
}

// MAC returns the device's Ethernet address.
func (d *Device) MAC() [6]byte { return d.mac }

// Clock returns the device's clock.
func (d *Device) Clock() Clock { return d.clock }

// Close stops the engines and closes the links. QPs stop where they are;
// verbs calls then fail with ErrClosed, and blocked CQ Waits return it.
func (d *Device) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		for _, e := range d.engines {
			e.shutdown(!d.cfg.Manual)
		}
		for _, e := range d.engines {
			if cerr := e.link.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close link: %w", cerr)
			}
		}
		if d.closer != nil {
			if cerr := d.closer.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close interface: %w", cerr)
			}
		}
		d.cqMu.Lock()
		for c := range d.cqs {
			c.close()
		}
		d.cqMu.Unlock()
	})
	return err
}

// Step runs one iteration of every engine: receive a batch, deliver it,
// fire due timers, let QPs send, transmit. It reports whether anything
// happened. Only for a Manual device, from one goroutine.
func (d *Device) Step() bool {
	work := false
	for _, e := range d.engines {
		e.batchMu.Lock()
		if e.step() {
			work = true
		}
		e.publishNow()
		e.batchMu.Unlock()
	}
	return work
}

// NextDeadline returns the earliest time a QP timer or a frame held by a
// link is due. Only for a Manual device, from the goroutine calling Step.
func (d *Device) NextDeadline() (Time, bool) {
	var t Time
	ok := false
	for _, e := range d.engines {
		e.batchMu.Lock()
		dl, k := e.nextDeadline()
		e.batchMu.Unlock()
		if k && (!ok || dl < t) {
			t, ok = dl, true
		}
	}
	return t, ok
}

// quiesce waits until every engine has finished the batch it is
// processing, so that nothing it looked up before stays in use.
func (d *Device) quiesce() {
	if d.cfg.Manual {
		return
	}
	for _, e := range d.engines {
		e.batchMu.Lock()
		e.batchMu.Unlock() //nolint:staticcheck // an empty critical section is the point
	}
}

// ResolveMAC resolves a peer's IP address to the MAC address packets to
// it are sent to, as address handles and connected QPs do (the kernel's
// neighbour table for a device on an interface), bounded by the
// device's ResolveTimeout and ctx. A multicast group's MAC is its
// MulticastMAC, with no neighbour asked.
func (d *Device) ResolveMAC(ctx context.Context, ip netip.Addr) ([6]byte, error) {
	if ip.Unmap().IsMulticast() {
		return MulticastMAC(ip), nil
	}
	if d.isOwn(ip.Unmap().WithZone("")) {
		return d.mac, nil
	}
	if d.cfg.Neighbors == nil {
		return [6]byte{}, fmt.Errorf("resolve %v: no neighbour table: %w", ip, ErrNoNeighbor)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ResolveTimeout)
	defer cancel()
	m, err := d.cfg.Neighbors.Resolve(ctx, ip.Unmap().WithZone(""))
	if err != nil {
		return m, fmt.Errorf("resolve %v: %w", ip, err)
	}
	return m, nil
}

// isOwn reports whether ip (unmapped, no zone) is one of the device's
// addresses.
func (d *Device) isOwn(ip netip.Addr) bool {
	if ip.Is4() {
		a := ip.As4()
		return slices.Contains(d.v4, a)
	}
	a := ip.As16()
	return slices.Contains(d.v6, a)
}

// resolvePath builds the headers of a path from an address handle's
// attributes.
func (d *Device) resolvePath(a *AHAttr) (pathInfo, error) {
	var p pathInfo
	if a.SGIDIndex < 0 || a.SGIDIndex >= len(d.gids) {
		return p, fmt.Errorf("sgid index %d of %d: %w", a.SGIDIndex, len(d.gids), ErrInvalidArg)
	}
	src := d.gids[a.SGIDIndex].Unmap()
	dst := a.DGID.Unmap().WithZone("")
	if !dst.IsValid() || dst.IsUnspecified() {
		return p, fmt.Errorf("dgid %v: %w", a.DGID, ErrInvalidArg)
	}
	if src.Is4() != dst.Is4() {
		return p, fmt.Errorf("sgid %v and dgid %v differ in family: %w", src, dst, ErrInvalidArg)
	}
	if a.FlowLabel > 0xfffff {
		return p, fmt.Errorf("flow label %#x: %w", a.FlowLabel, ErrInvalidArg)
	}
	mac := a.DMAC
	switch {
	case mac != [6]byte{}:
	case dst.IsMulticast():
		mac = MulticastMAC(dst) // a UD datagram to a group: no neighbour
	case d.isOwn(dst):
		mac = d.mac // to the device itself: looped back (engine.loop)
	}
	if mac == ([6]byte{}) {
		if d.cfg.Neighbors == nil {
			return p, fmt.Errorf("resolve %v: no neighbour table: %w", dst, ErrNoNeighbor)
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ResolveTimeout)
		m, err := d.cfg.Neighbors.Resolve(ctx, dst)
		cancel()
		if err != nil {
			return p, fmt.Errorf("resolve %v: %w", dst, err)
		}
		mac = m
	}
	p.av.Path.DstMAC = mac
	p.av.Path.SrcMAC = d.mac
	p.av.Path.SrcIP = src
	p.av.Path.DstIP = dst
	p.av.Path.TrafficClass = d.cfg.Marking.trafficClass(a.TrafficClass)
	if d.cfg.VLAN > 0 {
		pcp := a.SL & 7
		if pcp == 0 {
			pcp = d.cfg.Marking.priority(p.av.Path.TrafficClass)
		}
		p.av.Path.HasVLAN, p.av.Path.VLANTCI = true, uint16(pcp)<<13|uint16(d.cfg.VLAN)
	}
	p.av.Path.FlowLabel = a.FlowLabel
	p.av.Path.HopLimit = a.HopLimit
	p.src, p.dst = src, dst
	return p, nil
}

type pathInfo struct {
	av       qp.AddressVector
	src, dst netip.Addr
}

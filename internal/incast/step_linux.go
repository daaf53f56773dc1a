package incast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/uroce/uroce/internal/netns"
)

// The Step marker: a tc BPF program on the egress of the bottleneck port,
// run for every packet just before the rate limiter enqueues it. It reads
// the bytes waiting in the port's root qdisc (the rate limiter, whose
// backlog includes its child's) and, when they reach the threshold
// (Marking.Min), sets the packet to CE with bpf_skb_ecn_set_ce, which
// changes only ECN-capable IPv4 and IPv6 packets: DCTCP's "mark on arrival
// when the instantaneous queue exceeds K".
//
// The backlog is read from kernel memory with bpf_probe_read_kernel,
// following skb->dev->qdisc->qstats.backlog at offsets taken from the
// kernel's BTF when the program is built; a tc program's context is the
// sk_buff itself. This needs CAP_PERFMON (root), which lets the program
// hand the context's address to the helper.

// Names of the program and its map, as the kernel shows them (bpftool).
const (
	stepProgName  = "uroce_step"
	stepStateName = "uroce_step_st"
)

// Layout of the single uroce_step_st array entry, shared by all CPUs:
//
//	0   u64 packets  packets seen
//	8   u64 marked   packets set to CE (or that already were)
//	16  u64 arrivals packets whose backlog was read ...
//	24  u64 backlog  ... and the sum of the backlogs they found, in bytes
//
// packets and marked count a GSO packet as its number of segments, as
// they leave the bottleneck; arrivals counts it once.
const (
	stepPackets  = 0
	stepMarked   = 8
	stepArrivals = 16
	stepBacklog  = 24
	stepSize     = 32
)

// Offsets in struct __sk_buff.
const (
	skbLen     = 0
	skbWireLen = 160 // the length the qdiscs count: a GSO packet's segments with their headers (0 when unknown)
	skbGSOSegs = 164
)

// tcxNext is TCX_NEXT: pass the packet on to the next program or the
// qdisc.
const tcxNext = -1

// kernelOffsets are the offsets of the kernel structures' fields the
// marker follows, from the kernel's BTF.
type kernelOffsets struct {
	skbDev       int32 // struct sk_buff, dev
	devQdisc     int32 // struct net_device, qdisc
	qdiscBacklog int32 // struct Qdisc, qstats.backlog
}

// stepParams are the marker's constants, baked into the program.
type stepParams struct {
	off    kernelOffsets
	thresh int32 // marking threshold, bytes of backlog
	limit  int32 // the FIFO's limit in bytes
}

// loadKernelOffsets finds the fields the marker reads in the running
// kernel's BTF.
func loadKernelOffsets() (kernelOffsets, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return kernelOffsets{}, err
	}
	var o kernelOffsets
	for _, f := range []struct {
		dst   *int32
		typ   string
		field []string
	}{
		{&o.skbDev, "sk_buff", []string{"dev"}},
		{&o.devQdisc, "net_device", []string{"qdisc"}},
		{&o.qdiscBacklog, "Qdisc", []string{"qstats", "backlog"}},
	} {
		var st *btf.Struct
		if err := spec.TypeByName(f.typ, &st); err != nil {
			return kernelOffsets{}, fmt.Errorf("kernel BTF: struct %s: %w", f.typ, err)
		}
		off, err := fieldOffset(st, f.field)
		if err != nil {
			return kernelOffsets{}, fmt.Errorf("kernel BTF: struct %s: %w", f.typ, err)
		}
		*f.dst = int32(off)
	}
	return o, nil
}

// fieldOffset returns the byte offset of the field at path in the struct
// or union t, looking through anonymous structs and unions.
func fieldOffset(t btf.Type, path []string) (uint32, error) {
	m, off, ok := findMember(t, path[0])
	if !ok {
		return 0, fmt.Errorf("no field %s", path[0])
	}
	if len(path) == 1 {
		return off, nil
	}
	rest, err := fieldOffset(btf.UnderlyingType(m.Type), path[1:])
	return off + rest, err
}

func findMember(t btf.Type, name string) (btf.Member, uint32, bool) {
	var members []btf.Member
	switch c := t.(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	}
	for _, m := range members {
		if m.Name == name {
			return m, m.Offset.Bytes(), true
		}
		if m.Name == "" {
			if im, off, ok := findMember(btf.UnderlyingType(m.Type), name); ok {
				return im, m.Offset.Bytes() + off, true
			}
		}
	}
	return btf.Member{}, 0, false
}

// stepInstructions returns the marker. In C it would read:
//
//	n = skb->gso_segs ? skb->gso_segs : 1
//	st = lookup(&state, 0); if (!st) return TCX_NEXT
//	atomic_add(&st->packets, n)
//	if (probe_read_kernel(&dev, 8, (void *)skb + SKB_DEV) || !dev) return TCX_NEXT
//	if (probe_read_kernel(&q, 8, (void *)dev + DEV_QDISC) || !q) return TCX_NEXT
//	if (probe_read_kernel(&backlog, 4, (void *)q + QDISC_BACKLOG)) return TCX_NEXT
//	atomic_add(&st->arrivals, 1); atomic_add(&st->backlog, backlog)
//	if (backlog < thresh || backlog >= limit) return TCX_NEXT
//	fit = (limit - backlog) / ((skb->wire_len ?: skb->len) / n)
//	if (fit == 0) return TCX_NEXT
//	if (bpf_skb_ecn_set_ce(skb)) atomic_add(&st->marked, min(n, fit))
//	return TCX_NEXT
//
// Packets the FIFO is about to drop for want of room are not counted (a
// packet that does not fit at all is left alone; of a GSO packet, which the
// rate limiter splits into its segments, only the segments that fit), so
// that marked counts packets that leave the bottleneck with CE. A threshold
// above the limit marks nothing: the program then only measures the queue.
//
// Registers: R6 skb, R7 n, R8 state entry, R9 backlog; the stack holds the
// map key at -4 and what probe_read_kernel read last at -16.
func stepInstructions(p stepParams) asm.Instructions {
	ins := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, skbGSOSegs, asm.Word),
		asm.JNE.Imm(asm.R7, 0, "lookup"),
		asm.Mov.Imm(asm.R7, 1),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word).WithSymbol("lookup"),
		asm.LoadMapPtr(asm.R1, 0).WithReference(stepStateName),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R8, asm.R0),
		asm.AddAtomic.Mem(asm.R8, asm.R7, asm.DWord, stepPackets),
	}
	// probeRead emits probe_read_kernel(RFP-16, size, R3 + off) and
	// leaves on failure.
	probeRead := func(off, size int32) asm.Instructions {
		return asm.Instructions{
			asm.Add.Imm(asm.R3, off),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -16),
			asm.Mov.Imm(asm.R2, size),
			asm.FnProbeReadKernel.Call(),
			asm.JNE.Imm(asm.R0, 0, "out"),
		}
	}
	// lastPointer emits R3 = the pointer read last, leaving when it is
	// NULL.
	lastPointer := asm.Instructions{
		asm.LoadMem(asm.R3, asm.RFP, -16, asm.DWord),
		asm.JEq.Imm(asm.R3, 0, "out"),
	}
	ins = append(ins, asm.Mov.Reg(asm.R3, asm.R6))
	ins = append(ins, probeRead(p.off.skbDev, 8)...)
	ins = append(ins, lastPointer...)
	ins = append(ins, probeRead(p.off.devQdisc, 8)...)
	ins = append(ins, lastPointer...)
	ins = append(ins, probeRead(p.off.qdiscBacklog, 4)...)
	return append(ins,
		asm.LoadMem(asm.R9, asm.RFP, -16, asm.Word),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R8, asm.R1, asm.DWord, stepArrivals),
		asm.AddAtomic.Mem(asm.R8, asm.R9, asm.DWord, stepBacklog),
		asm.JLT.Imm(asm.R9, p.thresh, "out"),
		// R2 = bytes per segment, R1 = room / R2.
		asm.LoadMem(asm.R2, asm.R6, skbWireLen, asm.Word),
		asm.JNE.Imm(asm.R2, 0, "perseg"),
		asm.LoadMem(asm.R2, asm.R6, skbLen, asm.Word),
		asm.Div.Reg(asm.R2, asm.R7).WithSymbol("perseg"),
		asm.Mov.Imm(asm.R1, p.limit),
		asm.JLE.Reg(asm.R1, asm.R9, "out"),
		asm.Sub.Reg(asm.R1, asm.R9),
		asm.Div.Reg(asm.R1, asm.R2),
		asm.JEq.Imm(asm.R1, 0, "out"),
		asm.JLE.Reg(asm.R7, asm.R1, "mark"),
		asm.Mov.Reg(asm.R7, asm.R1),
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("mark"),
		asm.FnSkbEcnSetCe.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.AddAtomic.Mem(asm.R8, asm.R7, asm.DWord, stepMarked),

		asm.Mov.Imm(asm.R0, tcxNext).WithSymbol("out"),
		asm.Return(),
	)
}

func stepSpec(p stepParams) *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			stepStateName: {
				Name:       stepStateName,
				Type:       ebpf.Array,
				KeySize:    4,
				ValueSize:  stepSize,
				MaxEntries: 1,
			},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			stepProgName: {
				Name:         stepProgName,
				Type:         ebpf.SchedCLS,
				License:      "Dual MIT/GPL",
				Instructions: stepInstructions(p),
			},
		},
	}
}

// stepMarker is the loaded and attached marker.
type stepMarker struct {
	coll *ebpf.Collection
	link link.Link
}

// stepCounters are the marker's counters.
type stepCounters struct {
	Packets, Marked uint64
	// Arrivals found Backlog bytes waiting, all together.
	Arrivals, Backlog uint64
}

// stepSupport checks that the kernel can run the marker and returns the
// offsets it needs; its error wraps ErrUnsupported when the kernel cannot.
func stepSupport() (kernelOffsets, error) {
	for _, check := range []struct {
		what string
		err  error
	}{
		{"tc BPF programs", features.HaveProgramType(ebpf.SchedCLS)},
		{"bpf_skb_ecn_set_ce in tc programs", features.HaveProgramHelper(ebpf.SchedCLS, asm.FnSkbEcnSetCe)},
		{"bpf_probe_read_kernel in tc programs", features.HaveProgramHelper(ebpf.SchedCLS, asm.FnProbeReadKernel)},
	} {
		if errors.Is(check.err, ebpf.ErrNotSupported) {
			return kernelOffsets{}, fmt.Errorf("step marker: %s: %w", check.what, ErrUnsupported)
		}
		if check.err != nil {
			return kernelOffsets{}, fmt.Errorf("step marker: probe %s: %w", check.what, check.err)
		}
	}
	off, err := loadKernelOffsets()
	if errors.Is(err, ebpf.ErrNotSupported) {
		return kernelOffsets{}, fmt.Errorf("step marker: kernel BTF: %w", ErrUnsupported)
	}
	if err != nil {
		return kernelOffsets{}, fmt.Errorf("step marker: %w", err)
	}
	return off, nil
}

// attachStep loads the marker for c and attaches it to the egress of dev
// in ns. Unless mark, it marks nothing and only measures the backlog.
func attachStep(ns *netns.Namespace, dev string, c *Config, mark bool) (_ *stepMarker, err error) {
	off, err := stepSupport()
	if err != nil {
		return nil, err
	}
	thresh := int32(c.Marking.Min)
	if !mark {
		thresh = math.MaxInt32 // above any limit (maxLimit)
	}
	coll, err := ebpf.NewCollection(stepSpec(stepParams{off: off, thresh: thresh, limit: int32(c.Limit)}))
	if err != nil {
		return nil, fmt.Errorf("step marker: load: %w", err)
	}
	m := &stepMarker{coll: coll}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	err = ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		m.link, err = link.AttachTCX(link.TCXOptions{
			Interface: ifi.Index,
			Program:   coll.Programs[stepProgName],
			Attach:    ebpf.AttachTCXEgress,
		})
		return err
	})
	if errors.Is(err, ebpf.ErrNotSupported) {
		return nil, fmt.Errorf("step marker: attach to %s egress (tcx): %w", dev, ErrUnsupported)
	}
	if err != nil {
		return nil, fmt.Errorf("step marker: attach to %s egress: %w", dev, err)
	}
	return m, nil
}

// counters reads the marker's counters.
func (m *stepMarker) counters() (stepCounters, error) {
	var v [stepSize]byte
	if err := m.coll.Maps[stepStateName].Lookup(uint32(0), v[:]); err != nil {
		return stepCounters{}, fmt.Errorf("step marker: read counters: %w", err)
	}
	u64 := func(off int) uint64 { return binary.NativeEndian.Uint64(v[off:]) }
	return stepCounters{Packets: u64(stepPackets), Marked: u64(stepMarked), Arrivals: u64(stepArrivals),
		Backlog: u64(stepBacklog)}, nil
}

// Close detaches and unloads the marker.
func (m *stepMarker) Close() error {
	var errs []error
	if m.link != nil {
		errs = append(errs, m.link.Close())
		m.link = nil
	}
	if m.coll != nil {
		m.coll.Close()
		m.coll = nil
	}
	return errors.Join(errs...)
}

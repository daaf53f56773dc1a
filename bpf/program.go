package bpf

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2.
const RoCEv2Port = 4791

// MaxQueues is the number of entries of the XSKMAP: queues 0 to
// MaxQueues-1 can have a socket.
const MaxQueues = 256

// Names of the program and its maps, as the kernel shows them (bpftool).
const (
	progName  = "uroce_xdp"
	xsksName  = "uroce_xsks"
	cfgName   = "uroce_cfg"
	statsName = "uroce_stats"
)

// Layout of the single uroce_cfg array entry, shared by all CPUs:
//
//	0  u32 drop_every  drop one RoCE frame in drop_every (0: never)
//	4  u32 seq         RoCE frames seen while drop_every != 0 (atomic)
//
// and of the single uroce_stats per-CPU entry:
//
//	0  u64 roce        RoCE frames seen
//	8  u64 dropped     RoCE frames dropped by the fault knob
const (
	cfgDropEvery = 0
	cfgSeq       = 4
	cfgSize      = 8

	statRoCE    = 0
	statDropped = 8
	statsSize   = 16
)

// Offsets in struct xdp_md.
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// Action is an XDP program's verdict (enum xdp_action).
type Action uint32

// XDP verdicts.
const (
	Aborted  Action = 0
	Drop     Action = 1
	Pass     Action = 2
	TX       Action = 3
	Redirect Action = 4
)

func (a Action) String() string {
	switch a {
	case Aborted:
		return "XDP_ABORTED"
	case Drop:
		return "XDP_DROP"
	case Pass:
		return "XDP_PASS"
	case TX:
		return "XDP_TX"
	case Redirect:
		return "XDP_REDIRECT"
	}
	return "XDP_ACTION(?)"
}

// collectionSpec describes the XDP program and its maps. The program is
// loaded with BPF_F_XDP_HAS_FRAGS so it attaches to interfaces whose MTU
// exceeds a page; it only reads headers, which are always in the first
// buffer.
func collectionSpec() *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			xsksName: {
				Name:       xsksName,
				Type:       ebpf.XSKMap,
				KeySize:    4,
				ValueSize:  4,
				MaxEntries: MaxQueues,
			},
			cfgName: {
				Name:       cfgName,
				Type:       ebpf.Array,
				KeySize:    4,
				ValueSize:  cfgSize,
				MaxEntries: 1,
			},
			statsName: {
				Name:       statsName,
				Type:       ebpf.PerCPUArray,
				KeySize:    4,
				ValueSize:  statsSize,
				MaxEntries: 1,
			},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			progName: {
				Name:         progName,
				Type:         ebpf.XDP,
				Flags:        xdpHasFrags,
				License:      "Dual MIT/GPL",
				Instructions: instructions(),
			},
		},
	}
}

// xdpHasFrags is BPF_F_XDP_HAS_FRAGS.
const xdpHasFrags = 1 << 5

// instructions returns the steering program. In C it would read:
//
//	eth = data; if (eth + 14 > end) pass
//	type = eth->h_proto; l3 = eth + 14
//	if (type == 0x8100) { if (eth + 18 > end) pass; type = vlan->encap; l3 = eth + 18 }
//	if (type == 0x8808) return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS) // PAUSE, PFC
//	if (type == 0x0800) {
//		if (l3 + 20 > end || ip->protocol != 17 || ip->frag_off & 0x3fff || ip->version != 4) pass
//		if (ip->ihl < 5) pass; udp = l3 + ip->ihl*4; if (udp + 8 > end) pass
//	} else if (type == 0x86dd) {
//		if (l3 + 48 > end || ip6->version != 6 || ip6->nexthdr != 17) pass
//		udp = l3 + 40
//	} else pass
//	if (udp->dest != 4791) pass
//	stats->roce++
//	if (cfg->drop_every && (atomic_fetch_add(&cfg->seq, 1) + 1) % cfg->drop_every == 0) { stats->dropped++; return XDP_DROP }
//	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
//
// Registers: R6 ctx, R2 data, R3 data_end, R7 L3 header, R8 UDP header, R9
// per-CPU stats entry.
func instructions() asm.Instructions {
	be16 := func(r asm.Register) asm.Instruction { return asm.HostTo(asm.BE, r, asm.Half) }
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, mdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, mdDataEnd, asm.Word),

		// Ethernet, with at most one 802.1Q tag.
		asm.Mov.Reg(asm.R7, asm.R2),
		asm.Add.Imm(asm.R7, 14),
		asm.JGT.Reg(asm.R7, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 12, asm.Half),
		be16(asm.R4),
		asm.JNE.Imm(asm.R4, 0x8100, "l3"),
		asm.Mov.Reg(asm.R7, asm.R2),
		asm.Add.Imm(asm.R7, 18),
		asm.JGT.Reg(asm.R7, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R2, 16, asm.Half),
		be16(asm.R4),

		// MAC Control (PAUSE, PFC): to the socket, for the stack to
		// honour; not counted as RoCE, never dropped by the fault knob.
		asm.JEq.Imm(asm.R4, 0x8808, "redirect").WithSymbol("l3"),
		asm.JEq.Imm(asm.R4, 0x0800, "ipv4"),
		asm.JNE.Imm(asm.R4, 0x86dd, "pass"),

		// IPv6: fixed 40-byte header, UDP directly behind it.
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.Add.Imm(asm.R8, 48),
		asm.JGT.Reg(asm.R8, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 0, asm.Byte),
		asm.RSh.Imm(asm.R4, 4),
		asm.JNE.Imm(asm.R4, 6, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 6, asm.Byte),
		asm.JNE.Imm(asm.R4, 17, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 40+2, asm.Half),
		asm.Ja.Label("udp"),

		// IPv4: header length from IHL, options skipped, fragments passed.
		asm.Mov.Reg(asm.R8, asm.R7).WithSymbol("ipv4"),
		asm.Add.Imm(asm.R8, 20),
		asm.JGT.Reg(asm.R8, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 9, asm.Byte),
		asm.JNE.Imm(asm.R4, 17, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 6, asm.Half),
		be16(asm.R4),
		asm.And.Imm(asm.R4, 0x3fff),
		asm.JNE.Imm(asm.R4, 0, "pass"),
		asm.LoadMem(asm.R4, asm.R7, 0, asm.Byte),
		asm.Mov.Reg(asm.R5, asm.R4),
		asm.RSh.Imm(asm.R5, 4),
		asm.JNE.Imm(asm.R5, 4, "pass"),
		asm.And.Imm(asm.R4, 0x0f),
		asm.LSh.Imm(asm.R4, 2),
		asm.JLT.Imm(asm.R4, 20, "pass"),
		asm.Mov.Reg(asm.R8, asm.R7),
		asm.Add.Reg(asm.R8, asm.R4),
		asm.Mov.Reg(asm.R5, asm.R8),
		asm.Add.Imm(asm.R5, 8),
		asm.JGT.Reg(asm.R5, asm.R3, "pass"),
		asm.LoadMem(asm.R4, asm.R8, 2, asm.Half),

		// UDP destination port.
		be16(asm.R4).WithSymbol("udp"),
		asm.JNE.Imm(asm.R4, RoCEv2Port, "pass"),

		// A RoCEv2 frame: count it.
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(statsName),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.JEq.Imm(asm.R9, 0, "fault"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R9, asm.R1, asm.DWord, statRoCE),

		// The fault knob: drop one RoCE frame in drop_every.
		asm.LoadMapPtr(asm.R1, 0).WithReference(cfgName).WithSymbol("fault"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "redirect"),
		asm.LoadMem(asm.R1, asm.R0, cfgDropEvery, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "redirect"),
		asm.Mov.Imm(asm.R2, 1),
		fetchAdd(asm.R0, asm.R2, asm.Word, cfgSeq),
		asm.Add.Imm32(asm.R2, 1),
		asm.Mod.Reg32(asm.R2, asm.R1),
		asm.JNE.Imm(asm.R2, 0, "redirect"),
		asm.JEq.Imm(asm.R9, 0, "drop"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R9, asm.R1, asm.DWord, statDropped),
		asm.Mov.Imm(asm.R0, int32(Drop)).WithSymbol("drop"),
		asm.Return(),

		// To the AF_XDP socket of the receiving queue, or to the kernel
		// when the queue has none.
		asm.LoadMapPtr(asm.R1, 0).WithReference(xsksName).WithSymbol("redirect"),
		asm.LoadMem(asm.R2, asm.R6, mdRxQueueIndex, asm.Word),
		asm.Mov.Imm(asm.R3, int32(Pass)),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, int32(Pass)).WithSymbol("pass"),
		asm.Return(),
	}
}

// fetchAdd emits src = atomic_fetch_add((size *)(dst + off), src).
//
// cilium/ebpf v0.22.0 encodes an atomic instruction's operation (the
// immediate) from the instruction's Constant field read before it derives
// that field from the opcode, so the BPF_FETCH bit would be lost and src
// left unchanged. Setting Constant to the encoded operation makes the
// encoding right either way.
func fetchAdd(dst, src asm.Register, size asm.Size, off int16) asm.Instruction {
	ins := asm.FetchAdd.Mem(dst, src, size, off)
	ins.Constant = int64(asm.FetchAdd >> 8)
	return ins
}

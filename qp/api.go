// Package qp implements the InfiniBand transport rules of RoCE queue pairs
// (IBTA vol. 1 ch. 9 and 10.3) as sans-I/O state machines: RC requester,
// completer and responder, UC and UD.
//
// A QP owns no goroutine, socket or clock. Its inputs are verbs calls
// (Modify, PostSend, PostRecv), received packets (Receive) and the time
// (every call that may start a timer or act on one takes now, a
// monotonic time.Duration from an arbitrary epoch). Its outputs are
// packets handed to an Output and completions handed to a
// CompletionSink.
//
// # Calling contract
//
// The caller serialises all calls on one QP, and on the SRQ shared by
// several QPs; the stack runs them on the goroutine that owns the QP's
// link queue. Output.Send, CompletionSink.Complete and the Memory
// methods are called synchronously from inside QP methods and must not
// call back into the QP. The owner drives a QP like this:
//
//   - after PostSend, and after Receive when Busy reports true, call Pump:
//     Receive sends the responses the responder owes (ACKs, NAKs, READ
//     responses) itself, but new and retransmitted requests only go out
//     from Pump;
//   - when Output.Send returns false the packet stays pending; call Pump
//     again when transmit buffers are free (Busy tells whether anything
//     waits);
//   - call Tick when the time from Deadline has come, then Pump.
//
// Work queues are rings sized when the QP is created; in steady state no
// call allocates.
//
// # Behaviour worth knowing
//
// Moving a QP to ERR (by Modify or by a fatal error) completes every
// outstanding work request in order: a failed one with its own status,
// the rest with WCWRFlushErr, signaled or not (as rdma_rxe does).
// Unsignaled requests that succeed produce no completion unless
// Caps.SignalAll is set, but retire in order. A READ or atomic with
// max_rd_atomic 0 completes with WCLocQPOpErr. Responder errors follow
// rdma_rxe: the receive in progress completes with WCLocLenErr (buffer
// too small), WCLocProtErr (bad buffer key), WCRemAccessErr or
// WCRemInvReqErr, the requester gets the matching NAK and the QP enters
// ERR. UC drops a broken message silently; UD drops datagrams with a
// wrong Q_Key (counted in QKeyViolation) or without a posted receive.
//
// RC keeps the IBTA's end-to-end credits (credit.go): the responder's
// ACKs advertise the receives posted and not yet taken (code 31, no
// credits, with an SRQ), and the requester starts no SEND or RDMA WRITE
// with immediate past the limit they give, but the first packet of one
// message, with the A bit, whose answer brings the count up to date. A
// new QP knows no credits: its first such message begins with that
// probe, and toward a responder that advertises code 31, as rdma_rxe
// does, nothing waits after its first answer.
//
// # Loss recovery
//
// RC recovers from loss by go-back-N, as the IBTA requires: the
// responder NAKs the first request past a gap, and the requester sends
// everything again from the PSN the NAK names. Nothing new appears on
// the wire, but several things keep recovery short and off the local ACK
// timeout, which with the usual timeout values stalls a QP for tens of
// milliseconds:
//
//   - The requester keeps a send window of SEND and WRITE bytes
//     unacknowledged (Caps.SendWindow, small packets counting 1 KiB) and
//     asks for an ACK (the A bit) every quarter window and on the packet
//     that fills it: ACKs open the window before it is empty, a loss
//     shows within a quarter window, and what follows a loss is
//     bounded. The default window grows by 4 KiB for every window's
//     worth acknowledged, up to 256 KiB, and halves on every loss, down
//     to DefaultSendWindow (48 KiB): without loss the link sets the pace,
//     with frequent loss little waits behind each one.
//   - The responder sends one PSN sequence NAK per loss; a requester
//     ignores a repeated NAK for the same PSN arriving sooner after its
//     go-back than any round trip. The responder NAKs again when a
//     request arrives whose PSN is not above the previous
//     out-of-sequence one: the requester went back (or probes) and the
//     expected PSN is still missing. Requests of increasing PSN after a
//     NAK draw no further NAKs, so the requester takes every other NAK
//     as a new loss. A NAK saying that the retransmission from the
//     same PSN was lost again is acted on at once, but costs retry_cnt
//     at most once per ACK timeout (lostAgain): retry_cnt bounds the
//     time a request goes unanswered, (retry_cnt+1) ACK timeouts, as
//     against a responder that NAKs a gap once and leaves the rest to
//     the requester's timer.
//   - When nothing has been acknowledged for a little more than a
//     smoothed round trip, the requester sends its highest-PSN packet again with the
//     A bit (a loss probe). The answer (an ACK for a duplicate, a NAK
//     for a gap, or the execution of a lost last packet) shows what the
//     responder lacks when nothing else would: after the last packets
//     before the requester stops, a lost NAK, lost ACKs. Probes back off
//     exponentially and charge no retry; the ACK timeout still bounds
//     the time without progress.
//   - With Env.Stash, the responder keeps the SEND and WRITE requests
//     that follow a gap instead of dropping them (the payload of a
//     WRITE_MIDDLE goes straight to its place) and executes them in PSN
//     order when the missing request arrives. Its ACKs still name no
//     PSN above the highest the requester has sent since it went back
//     (see the ACK limit in responder.go): a go-back-N requester such
//     as rdma_rxe's sees duplicates acknowledged one by one, as from a
//     responder without a stash.
//   - After a NAK, the requester sends the NAKed packet again, then its
//     highest-PSN packet (a probe), both with the A bit, and waits. A
//     responder that kept the rest answers the probe, a duplicate for
//     it, with an ACK that covers everything: nothing more is sent
//     again. A responder that drops requests past a gap acknowledges
//     the NAKed packet and NAKs the next PSN for the probe: go-back-N
//     goes on from there. After three such answers in a row the
//     requester goes back plainly at once, trying the gentle way again
//     every 32 go-backs. Toward a responder seen to keep requests, new
//     ones go on while the answer is awaited, within the send window.
//     A NAKed READ or atomic goes again at once with the READs and
//     atomics after it, which no responder keeps.
//   - A READ that lost responses asks for what it lacks only, as the
//     IBTA allows: a new READ request at the PSN of the first response
//     missing, with the address moved on and the length cut to match,
//     which the responder answers as a duplicate READ (rdma_rxe and
//     this package's responder serve it from the right offset). The
//     responses that follow the gap are kept (placed where their PSN
//     says), so the request covers the gap and the first response kept,
//     whose copy in the answer shows that the answer went past the gap;
//     whatever the first answer did not bring after them is asked for
//     once the gap is filled. The responses of later READs are kept and
//     READs answered in full are not asked for again; an atomic whose
//     ACK was lost goes again alone.
//     A loss shows at once when a response comes past the one expected
//     of the same READ, or answers a request sent after the READ's last
//     one (responders answer in order). What nothing shows, the probe
//     timer asks for, with a timeout set by how soon READ answers follow
//     each other rather than by their round trip: the first and the last
//     READ lacking responses ask again, and the answers (or a NAK for a
//     lost request) show what else was lost. max_rd_atomic credits come
//     back in order, so that the responder still holds every READ asked
//     for again. Nothing of this allocates.
//
// Every retransmission starts in one function, goBackFor in
// completer.go, whose reasons are the list above: a sequence NAK, an
// implied NAK, lost READ or atomic responses, the ACK timeout, the probe
// and the RNR wait. Every NAK is made in one function, nak in
// responder.go, from one table (nakTable) that gives each responder
// error its syndrome, the receive completion's status, its counter and
// whether the QP enters ERR.
//
// # Files
//
// modify.go holds the state machine and the attribute table, queue.go the
// work queue rings and the SRQ, sg.go the scatter/gather walk,
// requester.go segmentation, transmission and the send window,
// completer.go acknowledgements, retransmission, READ recovery, loss
// probes and timers, responder.go the RC and UC receive side (kept
// requests too) and its NAKs, credit.go end-to-end credits, ud.go UD
// reception.
package qp

import (
	"errors"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/dcqcn"
)

// Type is the transport service of a QP.
type Type uint8

// QP types.
const (
	RC Type = iota + 1
	UC
	UD
)

func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return "invalid"
}

// Transport returns the transport of the QP type's BTH opcodes (none
// that an opcode carries for an invalid type).
func (t Type) Transport() bth.Transport {
	if int(t) >= len(typeTransports) || t == 0 {
		return 0xff
	}
	return typeTransports[t]
}

var typeTransports = [...]bth.Transport{RC: bth.TransportRC, UC: bth.TransportUC, UD: bth.TransportUD}

// State is a QP state (ibv_qp_state).
type State uint8

// QP states.
const (
	StateReset State = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// MTU is a path MTU enum as in verbs (ibv_mtu): 1 = 256 … 5 = 4096.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Access is a set of memory and QP access rights (ibv_access_flags).
type Access uint32

// Access rights.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// FLUSH rights (IBA 1.5 annex A19), one per placement type: a
	// FLUSH asking for global visibility needs AccessFlushGlobal of
	// both the QP and the region, one asking for persistence
	// AccessFlushPersistent.
	AccessFlushGlobal     Access = 1 << 8
	AccessFlushPersistent Access = 1 << 9
)

// AttrMask selects the attributes a Modify call sets (ibv_qp_attr_mask).
type AttrMask uint32

// Attribute mask bits, with the values of ibv_qp_attr_mask.
const (
	AttrState           AttrMask = 1 << 0
	AttrCurState        AttrMask = 1 << 1
	AttrAccessFlags     AttrMask = 1 << 3
	AttrPKeyIndex       AttrMask = 1 << 4
	AttrPort            AttrMask = 1 << 5
	AttrQKey            AttrMask = 1 << 6
	AttrAV              AttrMask = 1 << 7
	AttrPathMTU         AttrMask = 1 << 8
	AttrTimeout         AttrMask = 1 << 9
	AttrRetryCnt        AttrMask = 1 << 10
	AttrRNRRetry        AttrMask = 1 << 11
	AttrRQPSN           AttrMask = 1 << 12
	AttrMaxQPRdAtomic   AttrMask = 1 << 13
	AttrMinRNRTimer     AttrMask = 1 << 15
	AttrSQPSN           AttrMask = 1 << 16
	AttrMaxDestRdAtomic AttrMask = 1 << 17
	AttrDestQPN         AttrMask = 1 << 20
)

// AddressVector is where a connected QP sends, or where a UD work request
// goes (an address handle). The stack resolves GIDs to the Ethernet and
// IP headers in Path before handing it to the QP.
type AddressVector struct {
	// Path holds the Ethernet/VLAN/IP/UDP headers of every packet sent on
	// this path. The QP fills in the UDP source port for RC/UC when it is
	// zero (bth.SourcePort) and the IPv4 ID per packet.
	Path bth.L2L3
}

// Attr holds QP attributes (ibv_qp_attr); Modify reads those named by the mask.
type Attr struct {
	State           State
	CurState        State
	AccessFlags     Access // remote rights the responder grants (RC/UC)
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32 // UD
	AV              AddressVector
	PathMTU         MTU
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite
	RetryCnt        uint8 // 0–7
	RNRRetry        uint8 // 0–7, 7 = infinite
	RQPSN           bth.PSN
	SQPSN           bth.PSN
	MaxRdAtomic     uint8 // outstanding READ/atomic requests as requester
	MaxDestRdAtomic uint8 // READ/atomic resources as responder
	MinRNRTimer     uint8 // RNR NAK timer code this QP sends as responder
	DestQPN         uint32
}

// Caps are a QP's creation-time limits (ibv_qp_cap and ibv_qp_init_attr).
type Caps struct {
	Type       Type
	QPN        uint32
	MaxSendWR  int
	MaxRecvWR  int // ignored with an SRQ
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
	SignalAll  bool // sq_sig_all
	SRQ        *SRQ // shared receive queue, or nil
	PKey       uint16
	// InfiniteRetry7 makes RetryCnt 7 mean "retry forever", as rdma_rxe
	// does. The IBTA (and this package by default) treats 7 as 7 retries.
	InfiniteRetry7 bool
	// PortMTU is the active MTU of the port: the largest UD message and
	// the packet size of UD QPs, which have no path MTU attribute.
	// Zero means MTU4096.
	PortMTU MTU
	// SendWindow bounds, in bytes, the SEND and WRITE packets an RC
	// requester has sent and not yet seen acknowledged, each packet
	// counting its payload but at least 1 KiB (READ and atomic requests
	// are bounded by max_rd_atomic instead). One packet may always be
	// in flight. Zero means an adaptive window, from DefaultSendWindow
	// up to 256 KiB; a negative value no bound but the PSN space. See
	// the package documentation on loss recovery.
	SendWindow int
	// ReadWindow bounds, in bytes, the RDMA READ responses an RC
	// requester has asked for and not yet received in full (atomics
	// count 8 bytes): a READ that would take them past it waits, but one
	// may always be outstanding. Zero means DefaultReadWindow; a
	// negative value leaves only max_rd_atomic as a bound.
	ReadWindow int
	// CNP is how the QP answers CE-marked packets (congestion.go).
	CNP CNPConfig
	// DCQCN, when set, makes the QP react to CNPs with DCQCN's rate
	// control and pace its requests (congestion.go); nil ignores them
	// (they are counted). LineRate is the rate it starts and recovers
	// to, in bit/s (0: DefaultLineRate).
	DCQCN    *dcqcn.Params
	LineRate uint64
	// BatchAcks coalesces ACKs across a batch of received packets: the
	// ACK the responder owes last waits in the QP, and a later one
	// replaces it (counted in AckCoalesced), until Pump or
	// SendResponses sends it. The owner then calls Pump after every
	// batch (Busy reports the waiting ACK) and SendResponses where it
	// wants the ACK out sooner. Without it Receive sends every response
	// before it returns.
	BatchAcks bool
}

// DefaultSendWindow is where the adaptive send window of an RC QP whose
// Caps leave it zero starts, and what it falls back to under loss: enough
// in flight to keep a link busy, little enough that recovering from a
// loss (the responder working through what followed it) is quick.
const DefaultSendWindow = 48 << 10

// DefaultReadWindow is the READ window of an RC QP whose Caps leave it
// zero: 1 MiB of READ responses outstanding. Without it, max_rd_atomic
// is the only bound, and perftest's ib_read_bw asks for 128 READs at
// once: of 2 MiB each with -a, 256 MiB of responses that a software
// receiver cannot take at the rate a responder sends them, and every
// response after a lost one is asked for again (go-back-N), so the ACK
// timer runs out retry_cnt times and the READs fail (retry exceeded).
// rdma_rxe's requester holds back every request past 128 unacknowledged
// PSNs (512 KiB at MTU 4096), to the same end.
const DefaultReadWindow = 1 << 20

// WROpcode is a send work request's operation (ibv_wr_opcode).
type WROpcode uint8

// Send work request operations.
const (
	WRSend WROpcode = iota
	WRSendWithImm
	WRSendWithInv
	WRWrite
	WRWriteWithImm
	WRRead
	WRCompareSwap
	WRFetchAdd
	// WRFlush asks the responder to make what was placed in a region
	// (RemoteAddr, RKey, FlushLen; or the whole region) globally visible
	// or persistent (IBA 1.5 annex A19, ibv_wr_flush).
	WRFlush
	// WRAtomicWrite writes 8 bytes (the SGEs' or Inline) to an 8-byte
	// aligned RemoteAddr as one store (ibv_wr_atomic_write). Its inline
	// data needs no max_inline.
	WRAtomicWrite
	// WRBindMW and WRLocalInv are local operations on memory windows and
	// regions (IBV_WR_BIND_MW, IBV_WR_LOCAL_INV). The QP refuses them:
	// the stack, which owns the keys, executes them.
	WRBindMW
	WRLocalInv
)

// FlushType is the placement type of a FLUSH (ibv_placement_type).
type FlushType uint8

// Placement types.
const (
	FlushGlobal     FlushType = 1 << 0 // global visibility
	FlushPersistent FlushType = 1 << 1 // persistence
)

// FlushLevel is the selectivity level of a FLUSH (ibv_selectivity_level).
type FlushLevel uint8

// Selectivity levels.
const (
	FlushRange FlushLevel = 0 // RemoteAddr and FlushLen
	FlushMR    FlushLevel = 1 // the whole region of RKey
)

// SendFlags are ibv_send_flags.
type SendFlags uint8

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// SGE is a scatter/gather element: Length bytes at virtual address Addr
// of the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr). The QP copies it; the
// caller may reuse it after PostSend returns. Data of inline requests is
// copied at post time.
type SendWR struct {
	ID         uint64
	Opcode     WROpcode
	Flags      SendFlags
	SG         []SGE
	Imm        uint32 // immediate data, in host order; sent big-endian
	InvRKey    uint32 // SEND_WITH_INV
	RemoteAddr uint64 // WRITE, READ, atomics
	RKey       uint32
	CompareAdd uint64 // compare (CMP_SWAP) or add (FETCH_ADD)
	Swap       uint64
	FlushType  FlushType  // FLUSH
	FlushLevel FlushLevel // FLUSH
	FlushLen   uint32     // FLUSH with FlushRange: the bytes from RemoteAddr
	// Bind is a BIND_MW's binding; RKey is the window's new R_Key
	// (LOCAL_INV names its key in InvRKey). Env.Local carries both out.
	Bind LocalBind
	// Inline, with SendInline, is the data to send, taken instead of
	// what SG names (whose keys inline data does not need).
	Inline []byte
	// UD only.
	AH         *AddressVector
	RemoteQPN  uint32
	RemoteQKey uint32
}

// LocalBind is what a BIND_MW work request binds (ibv_mw_bind_info):
// Length bytes at Addr of the region whose L_Key is MR, with Access.
type LocalBind struct {
	MR     uint32
	Addr   uint64
	Length uint64
	Access Access
	// Type1 marks the bind of a type 1 window (ibv_bind_mw, which
	// rdma-core posts to the send queue too), not a BIND_MW work
	// request's (type 2).
	Type1 bool
}

// LocalOps carries out a QP's local operations, BIND_MW and LOCAL_INV,
// when the requester reaches them in the send queue: after the requests
// posted before them have been sent, before those after them (a fence
// waits for the READs and atomics before it, as for any request). They
// consume no PSN; their completions come in send-queue order.
type LocalOps interface {
	// Execute carries out wr and returns its completion status: a
	// failure (WCMWBindErr, WCLocQPOpErr) moves the QP out of service
	// as a failed request does.
	Execute(wr *SendWR) WCStatus
}

// RecvWR is a receive work request (ibv_recv_wr). The QP copies it.
type RecvWR struct {
	ID uint64
	SG []SGE
}

// WCStatus is a work completion status (ibv_wc_status, same values).
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{"success", "local length error", "local QP operation error",
	"local EE context operation error", "local protection error", "Work Request Flushed Error",
	"memory bind operation error", "bad response error", "local access error",
	"remote invalid request error", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error"}

// String returns ibv_wc_status_str's text.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "unknown"
}

// WCOpcode is the operation a completion reports (ibv_wc_opcode).
type WCOpcode uint8

// Completion operations, with ibv_wc_opcode values.
const (
	WCSend        WCOpcode = 0
	WCRDMAWrite   WCOpcode = 1
	WCRDMARead    WCOpcode = 2
	WCCompSwap    WCOpcode = 3
	WCFetchAdd    WCOpcode = 4
	WCBindMW      WCOpcode = 5
	WCLocalInv    WCOpcode = 6
	WCFlush       WCOpcode = 8
	WCAtomicWrite WCOpcode = 9
	WCRecv        WCOpcode = 128
	WCRecvRDMAImm WCOpcode = 129
)

// WCFlags are ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

// WC is a work completion (ibv_wc).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32
	Imm     uint32 // host order
	InvRKey uint32
	QPN     uint32 // the local QP
	SrcQP   uint32 // UD: the sender's QPN
	PKeyIdx uint16
	VendErr uint32
}

// CompletionSink receives completions. The QP calls it synchronously;
// send completions go to the send CQ, receive completions to the receive
// CQ. The WC is only valid during the call.
type CompletionSink interface {
	Complete(wc *WC, recv bool)
}

// Output transmits packets. Send is called synchronously with the
// headers and payload of one packet; the implementation encodes them
// (bth.Encode) into a transmit buffer before returning. It returns false
// when no buffer is free: the QP keeps the packet pending and retries on
// the next Pump.
type Output interface {
	Send(h *bth.Headers, payload []byte) bool
}

// Memory resolves keys to bytes for the QP: the stack's memory region
// table. Implementations must not allocate.
//
// The QP is done with the bytes one call returns (it copied into or out
// of them) before it calls Memory, Output or CompletionSink again, and
// it overwrites the whole of what Local returns for AccessLocalWrite:
// an implementation may return a buffer of its own, read from where the
// bytes are and written back afterwards (the stack does so for regions
// in another process's memory).
type Memory interface {
	// Local returns the bytes of a local SGE, checking the key, bounds
	// and, when need includes AccessLocalWrite, the region's rights.
	Local(lkey uint32, addr uint64, length uint32, need Access) ([]byte, bool)
	// Remote returns the bytes of a remote access by rkey, checking
	// bounds and rights (AccessRemoteWrite, AccessRemoteRead,
	// AccessRemoteAtomic).
	Remote(rkey uint32, va uint64, length uint32, need Access) ([]byte, bool)
	// Check reports whether Local (remote false) or Remote (remote
	// true) would grant the access, without touching the bytes: the QP
	// checks a whole message's range with it, then asks for the bytes
	// of one packet at a time.
	Check(key uint32, addr uint64, length uint32, need Access, remote bool) bool
	// Invalidate invalidates the memory window or region named by rkey
	// (SEND_WITH_INV); it reports whether the key was valid.
	Invalidate(rkey uint32) bool
	// Flush checks a FLUSH (IBA 1.5 annex A19): rkey names a valid
	// region granting need (AccessFlushGlobal, AccessFlushPersistent)
	// that holds [va, va+length), or, with whole, any bytes at all (a
	// zero length is checked too: a FLUSH has no zero-length
	// exemption). What the QP placed before is then visible and
	// persistent: an implementation that delays writes makes them
	// before the QP's next packet goes out.
	Flush(rkey uint32, va uint64, length uint32, need Access, whole bool) bool
}

// Errors returned by verbs calls. Protocol failures are never Go errors:
// they become NAKs and completion statuses.
var (
	ErrInvalidState = errors.New("invalid qp state for this operation")
	ErrInvalidAttr  = errors.New("invalid qp attribute")
	ErrQueueFull    = errors.New("work queue full")
	ErrTooManySGE   = errors.New("too many scatter/gather elements")
	ErrInvalidWR    = errors.New("invalid work request")
)

// Stash lends an RC responder buffers for requests that arrive after a
// gap, kept until the missing one comes (see Loss recovery in the
// package documentation). Get returns a buffer of at least n bytes, or
// nil when none is free; Put takes back one that Get returned. Both are
// called from inside QP methods, possibly for several QPs at once when
// QPs sharing a Stash run on different goroutines.
type Stash interface {
	Get(n int) []byte
	Put(b []byte)
}

// Env is what a QP needs from its surroundings.
type Env struct {
	Mem  Memory
	Out  Output
	Sink CompletionSink
	// Stash, when set, keeps SEND and WRITE requests that arrive after
	// a gap instead of dropping them.
	Stash Stash
	// Counters the QP increments; may be shared by QPs of one device
	// only when all of them run on one goroutine.
	Counters *Counters
	// Local, when set, lets RC and UC QPs take BIND_MW and LOCAL_INV
	// work requests (LocalOps).
	Local LocalOps
}

// Counters are per-QP (or per-device) protocol counters named after the
// rdma_rxe and mlx5 hardware counters where one exists.
type Counters struct {
	SentPkts            uint64 // sent_pkts
	RcvdPkts            uint64 // rcvd_pkts
	DuplicateRequest    uint64 // duplicate_request
	OutOfSequence       uint64 // out_of_sequence
	RcvdRNRErr          uint64 // rcvd_rnr_err: RNR NAKs received
	SendRNRErr          uint64 // send_rnr_err: RNR NAKs sent
	RcvdSeqErr          uint64 // rcvd_seq_err: PSN sequence NAKs received
	PacketSeqErr        uint64 // packet_seq_err: PSN sequence NAKs sent
	LocalAckTimeoutErr  uint64 // local_ack_timeout_err
	RetryExceededErr    uint64 // retry_exceeded_err
	RNRNakRetryErr      uint64 // rnr_nak_retry_err
	CompleterRetryErr   uint64 // completer_retry_err
	ImpliedNakSeqErr    uint64 // implied_nak_seq_err
	ReqRemoteAccessErrs uint64 // req_remote_access_errors
	ReqRemoteInvalidReq uint64 // req_remote_invalid_request
	RespRemoteAccessErr uint64 // resp_remote_access_errors
	RespLocalLengthErr  uint64 // resp_local_length_error
	RespCQEError        uint64 // resp_cqe_error
	RetransmittedPkts   uint64 // packets sent again (go-back-N)
	LossProbes          uint64 // tail-loss probes: a packet sent again before the ACK timeout
	QKeyViolation       uint64 // UD packets dropped for a wrong Q_Key
	CNPRcvd             uint64 // np_cnp_sent on the peer: CNPs received here
	NPECNMarked         uint64 // np_ecn_marked_roce_packets: CE-marked packets received
	NPCNPSent           uint64 // np_cnp_sent: CNPs sent in answer
	RPCNPHandled        uint64 // rp_cnp_handled: CNPs that cut the rate
	RPCNPIgnored        uint64 // rp_cnp_ignored: CNPs within the rate cut's monitor period
	AckCoalesced        uint64 // ack_coalesced: ACKs replaced by a later one before sending
	DroppedPkts         uint64 // dropped for any other reason
}

// Time is a monotonic instant, a duration since an arbitrary epoch.
type Time = time.Duration

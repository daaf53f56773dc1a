package stack

import (
	"github.com/uroce/uroce/pfc"
	"github.com/uroce/uroce/qp"
	"github.com/uroce/uroce/xdp"
)

// Counters are a device's counters: what its engines saw on the links
// and the sum of the protocol counters of its QPs (destroyed ones
// included). Names follow the rdma_rxe and mlx5 hardware counters where
// one exists; Each and Map give them.
type Counters struct {
	RcvdPkts       uint64 // rcvd_pkts: frames delivered to a QP
	SentPkts       uint64 // sent_pkts: frames the links took
	RcvICRCErr     uint64 // rcv_icrc_err: frames with a bad ICRC, dropped
	RcvMalformed   uint64 // rcv_malformed: RoCE frames with bad lengths or a reserved opcode
	RcvNotRoCE     uint64 // rcv_not_roce: frames that are not RoCEv2
	RcvUnsupported uint64 // rcv_unsupported: RoCEv1, RD/XRC/DC, or a transport the QP does not run
	RcvNotOurs     uint64 // rcv_not_ours: destination MAC or IP not the device's
	RcvUnknownQPN  uint64 // rcv_unknown_qpn: no QP with the destination QPN
	RcvAddrErr     uint64 // rcv_addr_err: a connected QP's packet from another peer or to another address
	RcvSteered     uint64 // rcv_steered: frames handed from one queue's engine to another's
	RcvSteerDrop   uint64 // rcv_steer_drop: such frames dropped for a full hand-off queue
	Loopback       uint64 // loopback_pkts: frames the device sent to itself (and multicast copies to its own QPs), not to the link
	TxEncodeErr    uint64 // tx_encode_err: packets that could not be built
	CQOverrun      uint64 // cq_overrun: completions lost to full CQs
	BackingErr     uint64 // backing_err: failed reads and writes of backed regions (the process gone, its memory unmapped)
	// The AF_XDP sockets' counters, summed over the queues (the kernel's
	// XDP_STATISTICS and the sockets' own): frames the kernel dropped
	// for a full RX ring or for lack of fill ring entries, the times
	// it found the fill ring or the TX ring empty, wake-ups after which
	// a busy device left frames on the TX ring, and frames too long to
	// send.
	XSKRxDropped     uint64 // xsk_rx_dropped
	XSKRxRingFull    uint64 // xsk_rx_ring_full
	XSKFillRingEmpty uint64 // xsk_fill_ring_empty
	XSKTxRingEmpty   uint64 // xsk_tx_ring_empty
	XSKTxBusy        uint64 // xsk_tx_busy
	XSKTxRejected    uint64 // xsk_tx_rejected
	// Pause counts the link partner's PAUSE and PFC frames and the time
	// they held transmission (rx_prio3_pause, ..., as ethtool names them).
	Pause pfc.Counters
	QP    qp.Counters
}

// Counters returns the device's counters.
func (d *Device) Counters() Counters {
	var c Counters
	for _, e := range d.engines {
		p := &e.pub
		c.RcvdPkts += p.rcvdPkts.Load()
		c.SentPkts += p.sentPkts.Load()
		c.RcvICRCErr += p.rcvICRCErr.Load()
		c.RcvMalformed += p.rcvMalformed.Load()
		c.RcvNotRoCE += p.rcvNotRoCE.Load()
		c.RcvUnsupported += p.rcvUnsupported.Load()
		c.RcvNotOurs += p.rcvNotOurs.Load()
		c.RcvUnknownQPN += p.rcvUnknownQPN.Load()
		c.RcvAddrErr += p.rcvAddrErr.Load()
		c.RcvSteered += p.rcvSteered.Load()
		c.RcvSteerDrop += p.rcvSteerDrop.Load()
		c.Loopback += p.loopback.Load()
		c.TxEncodeErr += p.txEncodeErr.Load()
		c.BackingErr += p.backingErr.Load()
		if x, ok := e.link.(interface{ XDPStats() (xdp.Stats, error) }); ok {
			if st, err := x.XDPStats(); err == nil {
				c.XSKRxDropped += st.RxDropped
				c.XSKRxRingFull += st.RxRingFull
				c.XSKFillRingEmpty += st.RxFillRingEmptyDescs
				c.XSKTxRingEmpty += st.TxRingEmptyDescs
				c.XSKTxBusy += st.TxBusy
				c.XSKTxRejected += st.TxRejected
			}
		}
	}
	c.CQOverrun = d.cqOverrun.Load()
	c.BackingErr += d.backingErr.Load()
	c.Pause = d.PauseCounters()
	d.retiredMu.Lock()
	c.QP = d.retired
	d.retiredMu.Unlock()
	d.qps.each(func(q *QP) {
		q.mu.Lock()
		if !q.destroyed {
			addCounters(&c.QP, &q.ctr)
		}
		q.mu.Unlock()
	})
	return c
}

// Each calls f with every counter's name and value: the device's, then
// the QP sums (whose sent_pkts and rcvd_pkts are left out: the device's
// count the same packets).
func (c *Counters) Each(f func(name string, v uint64)) {
	for _, fl := range deviceCounterFields {
		f(fl.name, *fl.get(c))
	}
	c.Pause.Each(f)
	EachQPCounter(&c.QP, func(name string, v uint64) {
		if name != "sent_pkts" && name != "rcvd_pkts" {
			f(name, v)
		}
	})
}

// Set sets the counter of the given name, as Each names it, and reports
// whether there is one: for counters that come from elsewhere (the
// daemon's).
func (c *Counters) Set(name string, v uint64) bool {
	for _, fl := range deviceCounterFields {
		if fl.name == name {
			*fl.get(c) = v
			return true
		}
	}
	if name == "sent_pkts" || name == "rcvd_pkts" {
		return false
	}
	if c.Pause.Set(name, v) {
		return true
	}
	for _, fl := range qpCounterFields {
		if fl.name == name {
			*fl.get(&c.QP) = v
			return true
		}
	}
	return false
}

// deviceCounterFields names the device's own counters.
var deviceCounterFields = []struct {
	name string
	get  func(*Counters) *uint64
}{
	{"rcvd_pkts", func(c *Counters) *uint64 { return &c.RcvdPkts }},
	{"sent_pkts", func(c *Counters) *uint64 { return &c.SentPkts }},
	{"rcv_icrc_err", func(c *Counters) *uint64 { return &c.RcvICRCErr }},
	{"rcv_malformed", func(c *Counters) *uint64 { return &c.RcvMalformed }},
	{"rcv_not_roce", func(c *Counters) *uint64 { return &c.RcvNotRoCE }},
	{"rcv_unsupported", func(c *Counters) *uint64 { return &c.RcvUnsupported }},
	{"rcv_not_ours", func(c *Counters) *uint64 { return &c.RcvNotOurs }},
	{"rcv_unknown_qpn", func(c *Counters) *uint64 { return &c.RcvUnknownQPN }},
	{"rcv_addr_err", func(c *Counters) *uint64 { return &c.RcvAddrErr }},
	{"rcv_steered", func(c *Counters) *uint64 { return &c.RcvSteered }},
	{"rcv_steer_drop", func(c *Counters) *uint64 { return &c.RcvSteerDrop }},
	{"loopback_pkts", func(c *Counters) *uint64 { return &c.Loopback }},
	{"tx_encode_err", func(c *Counters) *uint64 { return &c.TxEncodeErr }},
	{"cq_overrun", func(c *Counters) *uint64 { return &c.CQOverrun }},
	{"backing_err", func(c *Counters) *uint64 { return &c.BackingErr }},
	{"xsk_rx_dropped", func(c *Counters) *uint64 { return &c.XSKRxDropped }},
	{"xsk_rx_ring_full", func(c *Counters) *uint64 { return &c.XSKRxRingFull }},
	{"xsk_fill_ring_empty", func(c *Counters) *uint64 { return &c.XSKFillRingEmpty }},
	{"xsk_tx_ring_empty", func(c *Counters) *uint64 { return &c.XSKTxRingEmpty }},
	{"xsk_tx_busy", func(c *Counters) *uint64 { return &c.XSKTxBusy }},
	{"xsk_tx_rejected", func(c *Counters) *uint64 { return &c.XSKTxRejected }},
}

// Map returns the counters by name.
func (c *Counters) Map() map[string]uint64 {
	m := make(map[string]uint64, 40)
	c.Each(func(name string, v uint64) { m[name] = v })
	return m
}

// qpCounterFields names the fields of qp.Counters.
var qpCounterFields = []struct {
	name string
	get  func(*qp.Counters) *uint64
}{
	{"sent_pkts", func(c *qp.Counters) *uint64 { return &c.SentPkts }},
	{"rcvd_pkts", func(c *qp.Counters) *uint64 { return &c.RcvdPkts }},
	{"duplicate_request", func(c *qp.Counters) *uint64 { return &c.DuplicateRequest }},
	{"out_of_sequence", func(c *qp.Counters) *uint64 { return &c.OutOfSequence }},
	{"rcvd_rnr_err", func(c *qp.Counters) *uint64 { return &c.RcvdRNRErr }},
	{"send_rnr_err", func(c *qp.Counters) *uint64 { return &c.SendRNRErr }},
	{"rcvd_seq_err", func(c *qp.Counters) *uint64 { return &c.RcvdSeqErr }},
	{"packet_seq_err", func(c *qp.Counters) *uint64 { return &c.PacketSeqErr }},
	{"local_ack_timeout_err", func(c *qp.Counters) *uint64 { return &c.LocalAckTimeoutErr }},
	{"retry_exceeded_err", func(c *qp.Counters) *uint64 { return &c.RetryExceededErr }},
	{"rnr_nak_retry_err", func(c *qp.Counters) *uint64 { return &c.RNRNakRetryErr }},
	{"completer_retry_err", func(c *qp.Counters) *uint64 { return &c.CompleterRetryErr }},
	{"implied_nak_seq_err", func(c *qp.Counters) *uint64 { return &c.ImpliedNakSeqErr }},
	{"req_remote_access_errors", func(c *qp.Counters) *uint64 { return &c.ReqRemoteAccessErrs }},
	{"req_remote_invalid_request", func(c *qp.Counters) *uint64 { return &c.ReqRemoteInvalidReq }},
	{"resp_remote_access_errors", func(c *qp.Counters) *uint64 { return &c.RespRemoteAccessErr }},
	{"resp_local_length_error", func(c *qp.Counters) *uint64 { return &c.RespLocalLengthErr }},
	{"resp_cqe_error", func(c *qp.Counters) *uint64 { return &c.RespCQEError }},
	{"retransmitted_pkts", func(c *qp.Counters) *uint64 { return &c.RetransmittedPkts }},
	{"loss_probes", func(c *qp.Counters) *uint64 { return &c.LossProbes }},
	{"qkey_violation", func(c *qp.Counters) *uint64 { return &c.QKeyViolation }},
	{"cnp_rcvd", func(c *qp.Counters) *uint64 { return &c.CNPRcvd }},
	{"np_ecn_marked_roce_packets", func(c *qp.Counters) *uint64 { return &c.NPECNMarked }},
	{"np_cnp_sent", func(c *qp.Counters) *uint64 { return &c.NPCNPSent }},
	{"rp_cnp_handled", func(c *qp.Counters) *uint64 { return &c.RPCNPHandled }},
	{"rp_cnp_ignored", func(c *qp.Counters) *uint64 { return &c.RPCNPIgnored }},
	{"ack_coalesced", func(c *qp.Counters) *uint64 { return &c.AckCoalesced }},
	{"dropped_pkts", func(c *qp.Counters) *uint64 { return &c.DroppedPkts }},
}

// EachQPCounter calls f with the name and value of every QP counter
// (QP.Counters), named as rdma_rxe and mlx5 name them.
func EachQPCounter(c *qp.Counters, f func(name string, v uint64)) {
	for _, fl := range qpCounterFields {
		f(fl.name, *fl.get(c))
	}
}

func addCounters(dst, src *qp.Counters) {
	for _, fl := range qpCounterFields {
		*fl.get(dst) += *fl.get(src)
	}
}

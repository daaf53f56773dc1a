package qp

import "github.com/uroce/uroce/bth"

// grhLen is the GRH slot verbs reserves at the head of every UD receive
// buffer.
const grhLen = 40

// receiveUD delivers a UD datagram: Q_Key check, one receive WQE, the
// 40-byte GRH slot (the IPv6 header, or 20 zero bytes and the IPv4
// header, as rdma_rxe writes it) followed by the payload.
func (q *QP) receiveUD(p *bth.Packet) {
	d := p.DETH()
	if d.QKey() != q.attr.QKey {
		q.ctr.QKeyViolation++
		return
	}
	if p.PayloadN > q.mtu {
		q.ctr.DroppedPkts++
		return
	}
	if !q.takeRecv() {
		q.ctr.DroppedPkts++ // UD has no RNR: the datagram is lost
		return
	}
	var grh [grhLen]byte
	f := p.Frame
	if p.IPv6 {
		if p.L3+grhLen > len(f) {
			q.ctr.DroppedPkts++
			return
		}
		copy(grh[:], f[p.L3:p.L3+grhLen])
	} else {
		if p.L3+20 > len(f) {
			q.ctr.DroppedPkts++
			return
		}
		copy(grh[20:], f[p.L3:p.L3+20])
	}
	e := q.scatterRecv(0, grh[:])
	if e == rOK && uint64(grhLen+p.PayloadN) > q.resp.rwqe.length {
		e = rLocLen
	}
	if e == rOK {
		e = q.scatterRecv(grhLen, p.Payload())
	}
	if e != rOK {
		st := WCLocLenErr
		if e == rLocProt {
			st = WCLocProtErr
		} else {
			q.ctr.RespLocalLengthErr++
		}
		q.recvWC(st, WCRecv, 0, 0, 0, 0, d.SrcQP())
		q.enterErr(false)
		return
	}
	flags := WCWithGRH
	var imm uint32
	if p.Info.Imm {
		flags |= WCWithImm
		imm = p.ImmDt().Value()
	}
	q.recvWC(WCSuccess, WCRecv, uint32(grhLen+p.PayloadN), flags, imm, 0, d.SrcQP())
}

package stack

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/link/pipe"
)

// The QPs of fuzzDevice and the numbers its peer uses.
const (
	fuzzPeerQPN = 0x20
	fuzzPeerPSN = 100 // the first PSN the peer sends
	fuzzOurPSN  = 500 // the first PSN the device sends
)

// fuzzDevice opens a manual device on a pipe with the QPs arbitrary
// packets can reach: a UD QP, QP1, and RC and UC QPs connected to the
// pipe's other end (QPN fuzzPeerQPN), each with receives posted; the RC
// QP has a WRITE, a READ and an atomic outstanding, so that responses
// and ACKs meet a requester that waits for them. It returns the device,
// the other end, the fake clock and the QPs by number.
func fuzzDevice(t testing.TB) (*Device, *pipe.End, *FakeClock, map[string]uint32) {
	peer, l := pipe.New(pipe.Config{MTU: 1500, Slots: 256})
	clock := NewFakeClock(0)
	d := openManual(t, l, macB, []netip.Addr{ipB}, clock)
	S := newSide(t, d, 1<<16, 256)
	post := func(q *QP) {
		for i := 0; i < 8; i++ {
			if err := q.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{S.mr.SGE(uint64(i)*2048, 2048)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ud := S.qp(t, UD)
	udReady(t, ud, 0x11111111, 0)
	post(ud)
	gsi := gsiQP(t, S)
	for i := 0; i < 4; i++ {
		if err := gsi.PostRecv(&RecvWR{ID: uint64(i), SG: []SGE{S.mr.SGE(uint64(i+32)*512, 512)}}); err != nil {
			t.Fatal(err)
		}
	}
	gid := d.GIDIndex(ipB)
	conn := func(typ QPType) *QP {
		q := S.qp(t, typ)
		if err := q.ToInit(InitAttr{AccessFlags: AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTR(RTRAttr{DestQPN: fuzzPeerQPN, AH: AHAttr{DGID: ipA, SGIDIndex: gid}, RQPSN: fuzzPeerPSN,
			MaxDestRdAtomic: 4, MinRNRTimer: 1}); err != nil {
			t.Fatal(err)
		}
		if err := q.ToRTS(RTSAttr{SQPSN: fuzzOurPSN, Timeout: 10, RetryCnt: 3, RNRRetry: 3, MaxRdAtomic: 4}); err != nil {
			t.Fatal(err)
		}
		post(q)
		return q
	}
	rc, uc := conn(RC), conn(UC)
	remote := RemoteAddr{0x10000, 0x1234}
	for _, wr := range []SendWR{
		{ID: 100, Op: OpWrite, Flags: SendSignaled, SG: []SGE{S.mr.SGE(0, 3000)}, Remote: remote},
		{ID: 101, Op: OpRead, Flags: SendSignaled, SG: []SGE{S.mr.SGE(4096, 3000)}, Remote: remote},
		{ID: 102, Op: OpCompareSwap, Flags: SendSignaled, SG: []SGE{S.mr.SGE(8192, 8)}, Remote: remote, CompareAdd: 1, Swap: 2},
	} {
		if err := rc.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	return d, peer, clock, map[string]uint32{"ud": ud.QPN(), "gsi": gsi.QPN(), "rc": rc.QPN(), "uc": uc.QPN()}
}

// fuzzL2L3 addresses a packet from the pipe's other end to fuzzDevice.
var fuzzL2L3 = bth.L2L3{DstMAC: macB, SrcMAC: macA, SrcIP: ipA, DstIP: ipB, SrcPort: 0xc000}

// fuzzFrame wraps ib (a transport packet from its BTH on, at least a BTH,
// without the ICRC) in Ethernet, IPv4 and UDP headers from the pipe's
// other end to the device, with the right lengths and ICRC. bth.Encode
// lays out the frame for a reserved opcode (a BTH alone, never padded);
// ib's BTH then takes that one's place, and the ICRC is computed again.
func fuzzFrame(t testing.TB, ib []byte) []byte {
	h := bth.Headers{L2L3: fuzzL2L3, BTH: bth.BTHFields{Opcode: 0x1f}}
	f := make([]byte, h.FrameLen(len(ib)-bth.BTHLen))
	n, err := bth.Encode(f, &h, ib[bth.BTHLen:])
	if err != nil || n != len(f) {
		t.Fatalf("encode: %d bytes of %d, %v", n, len(f), err)
	}
	end := n - bth.ICRCLen
	l5 := end - len(ib)
	l4 := l5 - 8
	copy(f[l5:], ib[:bth.BTHLen])
	binary.LittleEndian.PutUint32(f[end:], bth.ICRCv4(f[14:l4], f[l4:l5], f[l5:end]))
	return f
}

// fuzzSeeds returns transport packets (BTH on, no ICRC) for each QP of
// fuzzDevice: the requests, responses and ACKs a peer sends.
func fuzzSeeds(t testing.TB, qpn map[string]uint32) [][]byte {
	var out [][]byte
	add := func(h bth.Headers, payload int) {
		h.L2L3 = fuzzL2L3
		h.BTH.PKey = 0xffff
		buf := make([]byte, h.FrameLen(payload))
		n, err := bth.Encode(buf, &h, make([]byte, payload))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[14+20+8:n-bth.ICRCLen])
	}
	psn := func(v uint32) bth.PSN { return bth.MakePSN(v) }
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpUDSendOnly, DestQP: qpn["ud"]}, QKey: 0x11111111, SrcQP: 0x30}, 64)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpUDSendOnly, DestQP: qpn["gsi"]}, QKey: GSIQKey, SrcQP: 1}, 256)
	for _, base := range []bth.Opcode{0, bth.OpUCBase} {
		q := qpn["rc"]
		if base == bth.OpUCBase {
			q = qpn["uc"]
		}
		add(bth.Headers{BTH: bth.BTHFields{Opcode: base | bth.OpSendOnly, DestQP: q, PSN: psn(fuzzPeerPSN), AckReq: true}}, 100)
		add(bth.Headers{BTH: bth.BTHFields{Opcode: base | bth.OpSendFirst, DestQP: q, PSN: psn(fuzzPeerPSN)}}, 1024)
		add(bth.Headers{BTH: bth.BTHFields{Opcode: base | bth.OpWriteOnly, DestQP: q, PSN: psn(fuzzPeerPSN)}, VA: 0, RKey: 0, DMALen: 16}, 16)
	}
	rc := qpn["rc"]
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpReadRequest, DestQP: rc, PSN: psn(fuzzPeerPSN)}, DMALen: 4096}, 0)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpFetchAdd, DestQP: rc, PSN: psn(fuzzPeerPSN)}, SwapAdd: 1}, 0)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpAck, DestQP: rc, PSN: psn(fuzzOurPSN + 2)}, Syndrome: 0x1f}, 0)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpAck, DestQP: rc, PSN: psn(fuzzOurPSN)}, Syndrome: 0x60}, 0) // PSN sequence NAK
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpAck, DestQP: rc, PSN: psn(fuzzOurPSN)}, Syndrome: 0x21}, 0) // RNR NAK
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpReadRespFirst, DestQP: rc, PSN: psn(fuzzOurPSN + 3)}, Syndrome: 0x1f}, 1024)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpReadRespLast, DestQP: rc, PSN: psn(fuzzOurPSN + 5)}, Syndrome: 0x1f}, 952)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpAtomicAck, DestQP: rc, PSN: psn(fuzzOurPSN + 6)}, Syndrome: 0x1f, AtomicAckOrig: 7}, 0)
	add(bth.Headers{BTH: bth.BTHFields{Opcode: bth.OpCNP, DestQP: rc}}, 0)
	return out
}

// FuzzEngineReceive gives the engine packets whose transport part is
// arbitrary but whose addresses, lengths and ICRC are right, so that they
// get past the ingress checks to the QPs. Nothing may panic, the engine
// must come to rest after each packet and after its timers fire, and what
// it sends back must be well formed.
func FuzzEngineReceive(f *testing.F) {
	_, _, _, qpn := fuzzDevice(f)
	for _, s := range fuzzSeeds(f, qpn) {
		f.Add(s, []byte(nil))
	}
	f.Fuzz(func(t *testing.T, ib, ib2 []byte) {
		// The ICRC is computed over a BTH at least; shorter packets are
		// TestEngineIngressChecks' (malformed).
		if len(ib) < bth.BTHLen || len(ib) > 1400 || len(ib2) > 1400 || (len(ib2) > 0 && len(ib2) < bth.BTHLen) {
			return
		}
		d, peer, clock, _ := fuzzDevice(t)
		rx := make([][]byte, 64)
		settle := func() {
			for i := 0; d.Step(); i++ {
				if i > 10000 {
					t.Fatal("the engine never comes to rest")
				}
			}
			for {
				k := peer.Receive(rx)
				if k == 0 {
					break
				}
				for _, fr := range rx[:k] {
					var p bth.Packet
					if err := bth.Parse(fr, &p); err != nil || !p.ICRCOK() {
						t.Fatalf("the device sent a bad frame (%v):\n% x", err, fr)
					}
				}
				peer.Release()
			}
		}
		settle()
		for _, b := range [][]byte{ib, ib2} {
			if len(b) == 0 {
				continue
			}
			if peer.Transmit([][]byte{fuzzFrame(t, b)}) != 1 {
				t.Fatal("pipe full")
			}
			settle()
		}
		for i := 0; i < 4; i++ {
			clock.Advance(time.Second)
			settle()
		}
		if c := d.Counters(); c.RcvdPkts+c.RcvMalformed+c.RcvUnknownQPN+c.RcvUnsupported+c.RcvICRCErr+c.RcvNotOurs == 0 {
			t.Fatalf("a packet went uncounted: %+v", c)
		}
	})
}

// TestFuzzSeedsReachQPs: every seed of FuzzEngineReceive passes the
// ingress checks and reaches its QP, so the fuzzer starts from packets
// that the transport handles, not from ones dropped at the door.
func TestFuzzSeedsReachQPs(t *testing.T) {
	_, _, _, qpn := fuzzDevice(t)
	for i, s := range fuzzSeeds(t, qpn) {
		d, peer, _, _ := fuzzDevice(t)
		if peer.Transmit([][]byte{fuzzFrame(t, s)}) != 1 {
			t.Fatal("pipe full")
		}
		for d.Step() {
		}
		c := d.Counters()
		if c.RcvdPkts != 1 || c.RcvMalformed+c.RcvUnknownQPN+c.RcvUnsupported+c.RcvICRCErr+c.RcvNotOurs != 0 {
			t.Errorf("seed %d (opcode %#x): %+v", i, s[0], c)
		}
	}
}

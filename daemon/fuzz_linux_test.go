package daemon

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/proto"
	"github.com/uroce/uroce/stack"
)

// FuzzHandle feeds a session any sequence of requests: the daemon
// answers or refuses each, never panics, and cleans up what was made.
// The input is messages, each behind a 2-byte length.
func FuzzHandle(f *testing.F) {
	seed := func(msgs ...[]byte) []byte {
		var b []byte
		for _, m := range msgs {
			b = binary.LittleEndian.AppendUint16(b, uint16(len(m)))
			b = append(b, m...)
		}
		return b
	}
	msg := func(op proto.Op, body any) []byte {
		m, _ := proto.Marshal(proto.Header{Op: op, Seq: 1}, body)
		return m
	}
	hello := msg(proto.OpHello, &proto.Hello{Version: proto.Version})
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8}),
		msg(proto.OpCreateQP, &proto.CreateQP{PD: 1, Type: proto.QPTypeRC, SendCQ: 2, RecvCQ: 2, MaxSendWR: 4, MaxRecvWR: 4}),
		msg(proto.OpModifyQP, &proto.ModifyQP{QP: 3, Mask: 1 | 1<<3 | 1<<4 | 1<<5, Attr: proto.QPAttr{State: 1, Port: 1}}),
		msg(proto.OpDestroyCQ, &proto.Handle{Handle: 2}), msg(proto.OpDestroyQP, &proto.Handle{Handle: 3})))
	f.Add(seed(hello, msg(proto.OpCreateChannel, nil), msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8, Channel: 1}),
		msg(proto.OpDestroyChannel, &proto.Handle{Handle: 1}), msg(proto.OpStat, &proto.StatReq{})))
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpCreateSRQ, &proto.CreateSRQ{PD: 1, MaxWR: 4, MaxSGE: 1}),
		msg(proto.OpResizeSRQ, &proto.ResizeSRQ{SRQ: 2, MaxWR: 64}), msg(proto.OpResizeSRQ, &proto.ResizeSRQ{SRQ: 2, MaxWR: 0}),
		msg(proto.OpDestroySRQ, &proto.Handle{Handle: 2})))
	f.Add(seed(hello, msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8}), msg(proto.OpResizeCQ, &proto.ResizeCQ{CQ: 1, CQE: 64}),
		msg(proto.OpResizeCQ, &proto.ResizeCQ{CQ: 1, CQE: -3}), msg(proto.OpDestroyCQ, &proto.Handle{Handle: 1})))
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpCreateSRQ, &proto.CreateSRQ{PD: 1, MaxWR: 4, MaxSGE: 1}),
		msg(proto.OpCreateAH, &proto.CreateAH{PD: 1, Attr: proto.AHAttr{SGIDIndex: 1}}), msg(proto.OpDeallocPD, &proto.Handle{Handle: 1})))
	// RDMA CM: a channel, IDs, bind, resolution, listen, connect and
	// the manual-QP requests, events, migration, teardown.
	v4 := func(a, b, c, d byte, port uint16) proto.CMAddr {
		return proto.CMAddr{Family: proto.AFInet, Port: port, Addr: [16]byte{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}}
	}
	f.Add(seed(hello, msg(proto.OpCMCreateChannel, nil),
		msg(proto.OpCMCreateID, &proto.CMCreateID{Channel: 1, PS: proto.PSTCP, QPType: proto.QPTypeRC}),
		msg(proto.OpCMBind, &proto.CMBind{ID: 2, Addr: v4(192, 0, 2, 1, 7000)}),
		msg(proto.OpCMListen, &proto.CMListen{ID: 2, Backlog: 4}),
		msg(proto.OpCMCreateID, &proto.CMCreateID{Channel: 1, PS: proto.PSUDP}),
		msg(proto.OpCMResolveAddr, &proto.CMResolve{ID: 3, TimeoutMS: 1, Dst: v4(192, 0, 2, 9, 7000)}),
		msg(proto.OpCMResolveRoute, &proto.CMResolve{ID: 3}),
		msg(proto.OpCMGetEvent, &proto.Handle{Handle: 1}),
		msg(proto.OpCMCreateChannel, nil), msg(proto.OpCMMigrateID, &proto.CMMigrateID{ID: 3, Channel: 4}),
		msg(proto.OpCMInitQPAttr, &proto.CMInitQPAttr{ID: 2, State: 2}),
		msg(proto.OpCMEstablish, &proto.Handle{Handle: 3}), msg(proto.OpCMDisconnect, &proto.Handle{Handle: 3}),
		msg(proto.OpCMDestroyChannel, &proto.Handle{Handle: 1}), msg(proto.OpCMDestroyID, &proto.Handle{Handle: 2})))
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8}),
		msg(proto.OpCreateQP, &proto.CreateQP{PD: 1, Type: proto.QPTypeRC, SendCQ: 2, RecvCQ: 2, MaxSendWR: 4, MaxRecvWR: 4}),
		msg(proto.OpCMCreateChannel, nil),
		msg(proto.OpCMCreateID, &proto.CMCreateID{Channel: 4, PS: proto.PSTCP}),
		msg(proto.OpCMResolveAddr, &proto.CMResolve{ID: 5, Dst: v4(192, 0, 2, 1, 7001)}),
		msg(proto.OpCMResolveRoute, &proto.CMResolve{ID: 5}),
		msg(proto.OpCMConnect, &proto.CMConnect{ID: 5, QP: 3, Param: proto.CMConnParam{PrivateDataLen: 200}}),
		msg(proto.OpCMConnect, &proto.CMConnect{ID: 5, Param: proto.CMConnParam{QPN: 0x11}}),
		msg(proto.OpCMAccept, &proto.CMConnect{ID: 5, QP: 3}),
		msg(proto.OpCMReject, &proto.CMReject{ID: 5, PrivateDataLen: 999})))
	// Memory windows: both types, a bind on a QP not in RTS, windows
	// of a PD that is deallocated before them, a region handle of
	// another kind.
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpAllocMW, &proto.AllocMW{PD: 1, Type: proto.MWType1}),
		msg(proto.OpAllocMW, &proto.AllocMW{PD: 1, Type: proto.MWType2}), msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8}),
		msg(proto.OpCreateQP, &proto.CreateQP{PD: 1, Type: proto.QPTypeRC, SendCQ: 4, RecvCQ: 4, MaxSendWR: 4, MaxRecvWR: 4}),
		msg(proto.OpBindMW, &proto.BindMW{QP: 5, MW: 2, MR: 4, Flags: 2, Length: 8, Access: 4}),
		msg(proto.OpBindMW, &proto.BindMW{QP: 5, MW: 3}), msg(proto.OpDeallocPD, &proto.Handle{Handle: 1}),
		msg(proto.OpDeallocMW, &proto.Handle{Handle: 3}), msg(proto.OpDeallocMW, &proto.Handle{Handle: 3}),
		msg(proto.OpAllocMW, &proto.AllocMW{PD: 1, Type: 7})))
	// Multicast: a UD QP attached, twice, to a group and to a unicast
	// GID, an RC QP attached, the UD QP destroyed while attached, and
	// the session ending with it attached.
	mg := [16]byte{10: 0xff, 11: 0xff, 12: 239, 15: 1}
	f.Add(seed(hello, msg(proto.OpAllocPD, nil), msg(proto.OpCreateCQ, &proto.CreateCQ{CQE: 8}),
		msg(proto.OpCreateQP, &proto.CreateQP{PD: 1, Type: proto.QPTypeUD, SendCQ: 2, RecvCQ: 2, MaxSendWR: 4, MaxRecvWR: 4}),
		msg(proto.OpCreateQP, &proto.CreateQP{PD: 1, Type: proto.QPTypeRC, SendCQ: 2, RecvCQ: 2, MaxSendWR: 4, MaxRecvWR: 4}),
		msg(proto.OpAttachMcast, &proto.McastReq{QP: 3, GID: mg}), msg(proto.OpAttachMcast, &proto.McastReq{QP: 3, GID: mg}),
		msg(proto.OpAttachMcast, &proto.McastReq{QP: 3, GID: [16]byte{10: 0xff, 11: 0xff, 12: 192}}),
		msg(proto.OpAttachMcast, &proto.McastReq{QP: 4, GID: mg}), msg(proto.OpDestroyQP, &proto.Handle{Handle: 3}),
		msg(proto.OpDetachMcast, &proto.McastReq{QP: 3, GID: mg}), msg(proto.OpDetachMcast, &proto.McastReq{QP: 3, GID: mg}),
		msg(proto.OpAttachMcast, &proto.McastReq{QP: 3, GID: mg}), msg(proto.OpAttachMcast, &proto.McastReq{QP: 1, GID: mg})))
	f.Add([]byte{})

	la, _ := pipe.New(pipe.Config{MTU: 1500})
	ip := netip.MustParseAddr("192.0.2.1")
	d, err := stack.Open(context.Background(), stack.Config{Link: la, MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addrs: []netip.Addr{ip},
		Neighbors: stack.StaticNeighbors{}})
	if err != nil {
		f.Fatal(err)
	}
	defer d.Close()
	dir, _ := os.MkdirTemp("", "uroce-fuzz-")
	defer os.RemoveAll(dir)
	srv, err := Listen(Config{Device: d, Socket: filepath.Join(dir, "s"), Limits: Limits{QPs: 8, CQs: 8, MRs: 8, PDs: 8, SRQs: 8,
		AHs: 8, Channels: 8, MRBytes: 1 << 20}})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Shutdown()
	f.Fuzz(func(t *testing.T, in []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fa, fb := os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
		ca, _ := net.FileConn(fa)
		fa.Close()
		defer fb.Close()
		ss := newSession(srv, ca.(*net.UnixConn), 1)
		for len(in) >= 2 {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			n = min(n, len(in))
			m := in[:n]
			in = in[n:]
			h, body, err := proto.ParseHeader(m)
			if err != nil || (!ss.started && h.Op != proto.OpHello) {
				continue
			}
			_, fd, _ := ss.handle(h, body, nil)
			if fd >= 0 && fd != ss.dbFD {
				unix.Close(fd)
			}
		}
		ss.end()
		if ss.started {
			unix.Close(ss.dbFD)
		}
	})
}

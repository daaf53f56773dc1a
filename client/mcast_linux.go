package client

import (
	"fmt"
	"net/netip"

	"github.com/uroce/uroce/proto"
)

// AttachMcast implements verbs.QP: the daemon attaches the UD QP to the
// multicast group gid (ibv_attach_mcast); see stack.QP.AttachMcast.
func (q *QP) AttachMcast(gid netip.Addr) error { return q.mcast(proto.OpAttachMcast, gid) }

// DetachMcast implements verbs.QP (ibv_detach_mcast).
func (q *QP) DetachMcast(gid netip.Addr) error { return q.mcast(proto.OpDetachMcast, gid) }

func (q *QP) mcast(op proto.Op, gid netip.Addr) error {
	var g [16]byte
	if gid.IsValid() {
		g = gid.As16()
	}
	if _, err := q.d.call(op, &proto.McastReq{QP: q.h, GID: g}, -1, nil); err != nil {
		return fmt.Errorf("%v: qp %#x: %v: %w", op, q.qpn, gid, err)
	}
	return nil
}

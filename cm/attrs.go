package cm

import (
	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/mad"
)

// QPAttrs are the attributes a connection's local QP gets at INIT→RTR
// and RTR→RTS from the REQ and REP exchanged (IBTA §12.7.x, the REQ and
// REP fields, and §11.2.4 modify QP). Package rdmacm converts them to
// the stack's RTRAttr and RTSAttr.
type QPAttrs struct {
	PKey uint16
	// RTR.
	DestQPN         uint32
	RQPSN           bth.PSN // first PSN expected from the peer
	PathMTU         mad.MTU
	MaxDestRdAtomic uint8 // READs and atomics accepted as responder
	// RTS.
	SQPSN       bth.PSN // first PSN sent
	Timeout     uint8   // local ACK timeout code
	RetryCnt    uint8
	RNRRetry    uint8
	MaxRdAtomic uint8 // READs and atomics outstanding as requester
}

// QPAttrsFor returns the attributes of the local QP of the side given by
// active, from the REQ and REP of its connection:
//
//   - the destination QPN is the other side's Local QPN;
//   - the REQ's Starting PSN is the passive side's first send PSN, the
//     REP's the active side's;
//   - the path MTU, P_Key and transport retry count are the REQ's;
//   - the RNR retry count is the REQ's for the passive side and the
//     REP's for the active side (each side tells the other how often to
//     retry an RNR NAK of its own);
//   - responder resources and initiator depth pair up: the passive side
//     accepts as responder what it put in the REP's Responder Resources
//     and issues what it put in Initiator Depth; the active side accepts
//     the REP's Initiator Depth and issues the REP's Responder Resources
//     (the passive side has already trimmed them to the REQ's);
//   - the local ACK timeout is the primary path's, no shorter than the
//     REP's target ACK delay allows (as the kernel's CM adjusts it).
func QPAttrsFor(active bool, req *mad.REQFields, rep *mad.REPFields) QPAttrs {
	a := QPAttrs{PKey: req.PKey, PathMTU: req.PathMTU, RetryCnt: req.RetryCount & 7,
		Timeout: req.Primary.LocalACKTimeout & 31}
	if t := rep.TargetACKDelay + 1; t > a.Timeout && t <= 31 {
		a.Timeout = t
	}
	if active {
		a.DestQPN = rep.LocalQPN
		a.RQPSN = req.StartingPSN
		a.SQPSN = rep.StartingPSN
		a.RNRRetry = rep.RNRRetryCount & 7
		a.MaxDestRdAtomic = rep.InitiatorDepth
		a.MaxRdAtomic = rep.ResponderResources
	} else {
		a.DestQPN = req.LocalQPN
		a.RQPSN = rep.StartingPSN
		a.SQPSN = req.StartingPSN
		a.RNRRetry = req.RNRRetryCount & 7
		a.MaxDestRdAtomic = rep.ResponderResources
		a.MaxRdAtomic = rep.InitiatorDepth
	}
	return a
}

// Answer returns the REP a passive side sends to req for its QP qpn,
// starting at psn, with at most responderResources READs and atomics
// accepted and initiatorDepth issued: both are trimmed to what the REQ
// offers (its Initiator Depth and Responder Resources, §12.7.29-30), the
// RNR retry count the active side is to use is rnrRetry, and the
// target ACK delay is ackDelay's code.
func Answer(req *mad.REQFields, qpn uint32, psn bth.PSN, responderResources, initiatorDepth, rnrRetry, ackDelay uint8) mad.REPFields {
	return mad.REPFields{
		LocalQPN:           qpn & 0xffffff,
		StartingPSN:        psn & 0xffffff,
		ResponderResources: min(responderResources, req.InitiatorDepth),
		InitiatorDepth:     min(initiatorDepth, req.ResponderResources),
		TargetACKDelay:     ackDelay & 31,
		RNRRetryCount:      rnrRetry & 7,
	}
}

package interop

import (
	"testing"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool"
)

// TestRxeECN runs WRITE, READ and SEND bandwidth tests both ways with
// congestion signalled on both paths: uroce marks 30 % of what it sends
// CE, as a congested switch would (--ce), and marks CE whatever
// ECN-capable frame it receives (--rx-ce); the stock tool's QP sends
// ECT(0) (--tclass=2). So rdma_rxe gets CE-marked requests and
// responses, and uroce's CNPs (which it does not act on), and every
// transfer must still complete and agree. The capture must show uroce's
// CE marks, rxe's ECT(0) and uroce's CNPs addressed to rxe's QPs.
func TestRxeECN(t *testing.T) {
	t.Parallel()
	var steps []step
	for _, tool := range []perfTool{writeBW, readBW, sendBW} {
		for _, gc := range []bool{false, true} {
			s := perfStep(tool, "-n 300 -s 8192", gc, "--ce", "0.3", "--rx-ce", "1")
			s.guest += " --tclass=2"
			s.name = "ecn-" + s.name
			steps = append(steps, s)
		}
	}
	g := group{mtu: 1500, pcap: "rxe-ecn.pcap", steps: steps}
	path, windows := g.runKeep(t)
	if path == "" {
		return
	}
	for _, w := range windows {
		var ce, ect, cnps, cnpsBad int
		var p bth.Packet
		err := eachFrame(path, func(_ int, f *pcaptool.Frame) {
			if f.Time.Before(w.from) || f.Time.After(w.to.Add(100*time.Millisecond)) || bth.Parse(f.Data, &p) != nil {
				return
			}
			src := p.SrcIP().Unmap().String()
			switch {
			case p.Opcode() == bth.OpCNP && src == uroceAddr:
				cnps++
				if !p.BTH().BECN() || p.TrafficClass()>>2 != 48 {
					cnpsBad++
				}
			case src == uroceAddr && p.ECN() == 3:
				ce++
			case src == guestAddr && p.ECN() == 2:
				ect++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: uroce sent %d CE-marked packets and %d CNPs; rxe sent %d ECT(0) packets", w.name, ce, cnps, ect)
		if ce == 0 || ect == 0 || cnps == 0 || cnpsBad != 0 {
			t.Errorf("%s: %d CE-marked from uroce, %d ECT(0) from rxe, %d CNPs from uroce (%d malformed)", w.name, ce, ect, cnps, cnpsBad)
		}
	}
}

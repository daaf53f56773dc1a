package stack

import (
	"fmt"
	"os"
	"strconv"

	"github.com/uroce/uroce/bth"
)

// traceLink records the frames a device transmits (for debugging
// simulations: UROCE_SIM_TRACE=1).
type traceLink struct {
	Link
	name  string
	clock Clock
	log   *[]string
	pkt   bth.Packet
}

func traceOn() bool { v, _ := strconv.ParseBool(os.Getenv("UROCE_SIM_TRACE")); return v }

func (l *traceLink) Transmit(frames [][]byte) int {
	n := l.Link.Transmit(frames)
	for _, f := range frames[:n] {
		p := &l.pkt
		if bth.Parse(f, p) != nil {
			continue
		}
		b := p.BTH()
		s := fmt.Sprintf("%v %s> %v qp %#x psn %#x a=%v len %d", l.clock.Now(), l.name, p.Opcode(), b.DestQP(), b.PSN(), b.AckReq(), p.PayloadN)
		if a := p.AETH(); a != nil {
			s += fmt.Sprintf(" aeth %#x msn %d", uint8(a.Syndrome()), a.MSN())
		}
		*l.log = append(*l.log, s)
	}
	return n
}

package interop

import (
	"strings"
	"testing"
)

// TestPerfRDMACM runs uroce perf -R against the stock ib_write_bw -R,
// ib_read_bw -R and ib_send_bw -R on rdma_rxe, both roles: the exchange
// and the test QPs' connections go over RDMA CM on port 18515, the keys
// and reports as SENDs on the exchange QP.
func TestPerfRDMACM(t *testing.T) {
	t.Parallel()
	var steps []step
	for _, c := range []struct {
		tool perfTool
		args string
	}{
		{writeBW, "-R -n 100 -s 65536"},
		{writeBW, "-R -n 20 -s 1048576"},
		{readBW, "-R -n 100 -s 65536"},
		{readBW, "-R -n 20 -s 1048576"},
		{sendBW, "-R -n 100 -s 65536"},
		{sendBW, "-R -n 20 -s 1048576"},
	} {
		for _, guestClient := range []bool{false, true} {
			steps = append(steps, perfCMStep(c.tool, c.args, guestClient))
		}
	}
	g := group{mtu: 1500, pcap: "perfcm.pcap", steps: steps}
	g.run(t)
}

// perfCMStep is perfStep, both sides also saying that the QPs are rdma_cm's.
func perfCMStep(tool perfTool, args string, guestClient bool) step {
	s := perfStep(tool, args, guestClient)
	check := s.check
	s.check = func(t *testing.T, g, u string) {
		t.Helper()
		check(t, g, u)
		for who, out := range map[string]string{"guest": g, "uroce": u} {
			if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm") {
				t.Errorf("%s: %s does not say rdma_cm:\n%s", s.name, who, out)
			}
		}
	}
	return s
}

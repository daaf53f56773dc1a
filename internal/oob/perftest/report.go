package perftest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/uroce/uroce/internal/oob/cfmt"
)

// ResultLine is the rule perftest prints around its test information and
// results, newline included.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// BWHeader returns the column header of the bandwidth tools, newline
// included; gbps selects the Gb/s report format (--report_gbits) over MB/s.
func BWHeader(gbps bool) string {
	if gbps {
		return " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
	}
	return " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
}

// BWLine returns a bandwidth tool's result line for r, newline included.
// In Gb/s, an average below 0.1 is printed with six decimals, as perftest
// does.
func BWLine(r Report, gbps bool) string {
	if gbps && r.BWAvg < 0.1 {
		return fmt.Sprintf(" %-7d    %d           %s            %s            %s\n",
			r.Size, r.Iters, cfmt.LeftFloat(r.BWPeak, 7, 6), cfmt.LeftFloat(r.BWAvg, 7, 6), cfmt.LeftFloat(r.MsgRate, 7, 6))
	}
	return fmt.Sprintf(" %-7d    %-10d       %s            %s\t\t   %s\n",
		r.Size, r.Iters, cfmt.LeftFloat(r.BWPeak, 7, 2), cfmt.LeftFloat(r.BWAvg, 7, 2), cfmt.LeftFloat(r.MsgRate, 7, 6))
}

// MeasureBW computes a bandwidth report the way perftest's print_report_bw
// does for one QP without post lists, from the time each message was posted
// and completed (in any unit; unitsPerSec converts). Peak is the best
// average over any run of consecutive completions that ends at a signalled
// one (every cqMod-th, and the last); average is over the whole run. MB/s
// uses 2^20 bytes, Gb/s 10^9 bits.
func MeasureBW(size uint64, posted, completed []int64, cqMod int, unitsPerSec float64, gbps bool) (Report, error) {
	n := len(posted)
	if n == 0 || len(completed) != n || cqMod < 1 || unitsPerSec <= 0 {
		return Report{}, errors.New("perftest bw report: need equal, non-empty posted and completed times, cqMod ≥ 1 and a clock rate")
	}
	format := float64(0x100000)
	if gbps {
		format = 125000000
	}
	opt := completed[0] - posted[0]
	for i := range n {
		consider := func(j int) {
			if t := (completed[j] - posted[i]) / int64(j-i+1); t < opt {
				opt = t
			}
		}
		for j := (i+1+cqMod-1)/cqMod*cqMod - 1; j < n; j += cqMod {
			consider(j)
		}
		if n%cqMod != 0 {
			consider(n - 1)
		}
	}
	total := float64(completed[n-1] - posted[0])
	r := Report{
		Size:    size,
		Iters:   uint64(n),
		BWAvg:   float64(size) * float64(n) * unitsPerSec / (total * format),
		MsgRate: float64(n) * unitsPerSec / (total * 1e6),
	}
	// perftest computes the peak in 64-bit integers.
	up := uint64(size) * uint64(unitsPerSec)
	down := uint64(opt) * uint64(format)
	r.BWPeak = float64(up) / float64(down)
	return r, nil
}

// LatHeader returns the column header of the latency tools, newline
// included.
func LatHeader() string {
	return " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"
}

// LatDurHeader returns the column header of the latency tools in
// duration mode (-D), newline included.
func LatDurHeader() string {
	return " #bytes        #iterations       t_avg[usec]    tps average\n"
}

// LatDurStats are the figures of a latency tool's duration-mode line:
// the iterations completed in the sampled time, the average latency in
// microseconds and the transactions per second.
type LatDurStats struct {
	Size, Iters uint64
	Avg, TPS    float64
}

// MeasureLatDuration computes the duration-mode figures as perftest's
// print_report_lat_duration does: iters iterations completed in sample
// seconds, each a round trip (rttFactor 2: write and send) or not (1:
// read and atomic). No iteration gives an infinite latency, as there.
func MeasureLatDuration(size, iters uint64, sample float64, rttFactor int) LatDurStats {
	usec := sample * 1e6
	return LatDurStats{Size: size, Iters: iters, Avg: usec / float64(rttFactor) / float64(iters), TPS: float64(iters) / sample}
}

// LatDurLine returns a latency tool's duration-mode result line, newline
// included.
func LatDurLine(s LatDurStats) string {
	return fmt.Sprintf(" %-7d       %d            %s        %s\n", s.Size, s.Iters, cfmt.LeftFloat(s.Avg, 7, 2), cfmt.LeftFloat(s.TPS, 7, 2))
}

// LatStats are the figures of a latency result line, in microseconds.
type LatStats struct {
	Size, Iters            uint64
	Min, Max, Typical, Avg float64
	Stdev, P99, P999       float64
}

// LatLine returns a latency tool's result line, newline included.
func LatLine(s LatStats) string {
	f := func(x float64) string { return cfmt.LeftFloat(x, 7, 2) }
	return fmt.Sprintf(" %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n",
		s.Size, s.Iters, f(s.Min), f(s.Max), f(s.Typical), f(s.Avg), f(s.Stdev), f(s.P99), f(s.P999))
}

// latTail is how many of the largest samples perftest drops
// (LAT_MEASURE_TAIL).
const latTail = 2

// MeasureLat computes the latency figures the way perftest's
// print_report_lat does for an iterations test, from the times (in any
// unit; unitsPerUsec converts) at which each of the iters messages was
// posted: the samples are the gaps between consecutive posts, halved for a
// round trip (rttFactor 2: write and send ping-pong) or not (1: read and
// atomic). perftest's quirks are kept: the two largest samples are dropped
// before the statistics, "t_max" is the smallest dropped one, the median
// averages in integer units, and the standard deviation sums truncated
// integer squares.
func MeasureLat(size uint64, posted []int64, unitsPerUsec float64, rttFactor int) (LatStats, error) {
	iters := len(posted)
	if iters < 5 || unitsPerUsec <= 0 || (rttFactor != 1 && rttFactor != 2) {
		return LatStats{}, errors.New("perftest latency report: need at least 5 posts, a clock rate and an RTT factor of 1 or 2")
	}
	delta := make([]int64, iters-1)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	slices.Sort(delta)
	q := unitsPerUsec * float64(rttFactor)
	n := len(delta) - latTail
	var median int64
	if (n-1)%2 != 0 {
		median = (delta[n/2] + delta[n/2-1]) / 2
	} else {
		median = delta[n/2]
	}
	var sum float64
	for _, d := range delta[:n] {
		sum += float64(d) / q
	}
	avg := sum / float64(n)
	var sq float64
	for _, d := range delta[:n] {
		v := int32(avg - float64(d)/q)
		sq += float64(int32(math.Pow(float64(v), 2)))
	}
	i99 := int(math.Ceil(float64(n) * 0.99))
	i999 := int(math.Ceil(float64(n) * 0.999))
	return LatStats{
		Size: size, Iters: uint64(iters),
		Min:     float64(delta[0]) / q,
		Max:     float64(delta[n]) / q,
		Typical: float64(median) / q,
		Avg:     avg,
		Stdev:   math.Sqrt(sq / float64(n)),
		P99:     float64(delta[i99]) / q,
		P999:    float64(delta[i999]) / q,
	}, nil
}

// AddressLines returns what ctx_print_pingpong_data prints for one QP,
// newlines included: " local address: LID 0000 QPN 0x0011 PSN 0x21030e",
// then " OUT 0x80" for reads, " RKey … VAddr …" for writes and reads, and
// with a GID a second line of its bytes in decimal (" GID: 00:…:192:00:02:01").
func AddressLines(remote bool, verb Verb, d Dest, withGID bool) string {
	var b strings.Builder
	side := "local"
	if remote {
		side = "remote"
	}
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side,
		cfmt.AltHex(uint64(d.LID), 4), cfmt.AltHex(uint64(d.QPN), 6), cfmt.AltHex(uint64(d.PSN), 6))
	if verb == Read {
		fmt.Fprintf(&b, " OUT %s", cfmt.AltHex(uint64(d.OutReads), 4))
	}
	if verb == Read || verb == Write {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cfmt.AltHex(uint64(d.RKey), 8), cfmt.AltHex(d.VAddr, 16))
	}
	b.WriteByte('\n')
	if withGID {
		b.WriteString(" GID: ")
		for i, x := range d.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", x)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestInfo is what ctx_print_test_info shows before the keys: the test's
// parameters. Fields left zero print as zero; the caller fills them as the
// stock tool would for the same flags.
type TestInfo struct {
	Tool       Tool
	Role       Role
	AtomicType string // ib_atomic_bw: "FETCH_AND_ADD" (default) or "CMP_AND_SWAP"
	Device     string
	QPs        int
	Transport  string // "IB" for RoCE too
	Connection string // "RC", "UC", "UD"
	UseSRQ     bool
	// PCIeRelaxOrder is "ON", "OFF", or "Unsupported" for builds without
	// it; Debian's build prints "ON" unless --disable_pcie_relaxed.
	PCIeRelaxOrder string
	// RelaxOrderWarning adds the two warning lines perftest prints on CPUs
	// it knows to mishandle relaxed ordering.
	RelaxOrderWarning bool
	WRAPI             bool // "ibv_wr* API: ON"
	TxDepth, RxDepth  int
	PostList          int
	CQMod             int
	MTU               MTU
	LinkType          string // "Ethernet" or "IB"
	GIDIndex          int    // -1: not shown
	InlineSize        int
	OutReads          int
	// RDMACM is -R: "rdma_cm QPs : ON", "Data ex. method : rdma_cm", and
	// the server's line asking for the client.
	RDMACM bool
	// Duplex is -b: "Bidirectional" in the title, and both sides show
	// their TX depth (and RX depth, sending).
	Duplex bool
}

var testNames = [...]string{Send: "Send", Write: "RDMA_Write", Read: "RDMA_Read", Atomic: "Atomic"}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// String returns the block as perftest prints it, both rules included.
func (ti TestInfo) String() string {
	var b strings.Builder
	verb := ti.Tool.Verb()
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(testNames[verb] + " ")
	if verb == Atomic {
		b.WriteString(ti.AtomicType + " ")
	}
	if ti.Tool.BW() {
		if ti.Duplex {
			b.WriteString("Bidirectional ")
		}
		if ti.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", ti.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", ti.QPs, ti.Transport)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", ti.Connection, onOff(ti.UseSRQ))
	fmt.Fprintf(&b, " PCIe relax order: %s\n", ti.PCIeRelaxOrder)
	if ti.RelaxOrderWarning {
		b.WriteString(" WARNING: CPU is not PCIe relaxed ordering compliant.\n")
		b.WriteString(" WARNING: You should disable PCIe RO with `--disable_pcie_relaxed` for both server and client.\n")
	}
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", onOff(ti.WRAPI))
	if ti.Role == Client || ti.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", ti.TxDepth)
	}
	if ti.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", ti.PostList)
	}
	if verb == Send && (ti.Role == Server || ti.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", ti.RxDepth)
	}
	if ti.Tool.BW() {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", ti.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", ti.MTU.Bytes())
	fmt.Fprintf(&b, " Link type       : %s\n", ti.LinkType)
	if ti.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", ti.GIDIndex)
	}
	if verb != Read && verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", ti.InlineSize)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", ti.OutReads)
	}
	if !ti.RDMACM {
		b.WriteString(" rdma_cm QPs\t : OFF\n")
		b.WriteString(" Data ex. method : Ethernet\n")
		b.WriteString(ResultLine)
		return b.String()
	}
	b.WriteString(" rdma_cm QPs\t : ON\n")
	b.WriteString(" Data ex. method : rdma_cm")
	if ti.Role == Server {
		b.WriteString("\n" + ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n" + ResultLine)
	return b.String()
}

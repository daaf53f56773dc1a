package perftest

import (
	"math"
	"net/netip"
	"strings"
	"testing"
)

// Expected lines below were printed with perftest 4.5's format strings
// (perftest_parameters.h, perftest_communication.h) by glibc's printf.

func TestHeaders(t *testing.T) {
	if got, want := BWHeader(false), " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"; got != want {
		t.Errorf("BWHeader(MB) = %q", got)
	}
	if got, want := BWHeader(true), " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"; got != want {
		t.Errorf("BWHeader(Gb) = %q", got)
	}
	if got, want := LatHeader(), " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"; got != want {
		t.Errorf("LatHeader = %q", got)
	}
	if len(ResultLine) != 88 {
		t.Errorf("ResultLine has %d bytes", len(ResultLine))
	}
}

func TestBWLine(t *testing.T) {
	// In Gb/s an average below 0.1 switches to six decimals.
	for _, tc := range []struct {
		r        Report
		mb, gbit string
	}{
		{Report{3000, 5, 1.1879, 1.1878, 0.000415},
			" 3000       5                1.19               1.19   \t\t   0.000415\n",
			" 3000       5                1.19               1.19   \t\t   0.000415\n"},
		{Report{65536, 5000, 11234.567, 11000.123456, 0.176001},
			" 65536      5000             11234.57            11000.12\t\t   0.176001\n",
			" 65536      5000             11234.57            11000.12\t\t   0.176001\n"},
		{Report{1, 1000, 0, 0, 0},
			" 1          1000             0.00               0.00   \t\t   0.000000\n",
			" 1          1000           0.000000            0.000000            0.000000\n"},
		{Report{8388608, 1000, 0.05, 0.049, 0.000006},
			" 8388608    1000             0.05               0.05   \t\t   0.000006\n",
			" 8388608    1000           0.050000            0.049000            0.000006\n"},
		{Report{12345678901, 12345678901, 123456789.125, 1e-7, 99.5},
			" 12345678901    12345678901       123456789.12            0.00   \t\t   99.500000\n",
			" 12345678901    12345678901           123456789.125000            0.000000            99.500000\n"},
	} {
		if got := BWLine(tc.r, false); got != tc.mb {
			t.Errorf("BWLine(%+v, MB) = %q, want %q", tc.r, got, tc.mb)
		}
		if got := BWLine(tc.r, true); got != tc.gbit {
			t.Errorf("BWLine(%+v, Gb) = %q, want %q", tc.r, got, tc.gbit)
		}
	}
}

func TestLatLine(t *testing.T) {
	for _, tc := range []struct {
		s    LatStats
		want string
	}{
		{LatStats{64, 5, 3.51, 4.2, 3.875, 3.9, 0, 4.2, 4.2},
			" 64      5          3.51           4.20         3.88     \t       3.90        \t0.00   \t\t4.20    \t\t4.20   \n"},
		{LatStats{1048576, 1000, 123.456, 12345.678, 234.5, 250.25, 17.125, 1000, 12345.678},
			" 1048576 1000          123.46         12345.68      234.50   \t       250.25      \t17.12  \t\t1000.00 \t\t12345.68\n"},
	} {
		if got := LatLine(tc.s); got != tc.want {
			t.Errorf("LatLine(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestAddressLines(t *testing.T) {
	d := Dest{OutReads: 0x80, QPN: 0x11, PSN: 0x21030e, RKey: 0x254, VAddr: 0x55971a66e000, GID: netip.MustParseAddr("::ffff:192.0.2.1").As16()}
	if got, want := AddressLines(false, Read, d, true),
		" local address: LID 0000 QPN 0x0011 PSN 0x21030e OUT 0x80 RKey 0x000254 VAddr 0x0055971a66e000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01\n"; got != want {
		t.Errorf("AddressLines(read) = %q, want %q", got, want)
	}
	if got, want := AddressLines(true, Write, Dest{QPN: 1}, false),
		" remote address: LID 0000 QPN 0x0001 PSN 000000 RKey 00000000 VAddr 0000000000000000\n"; got != want {
		t.Errorf("AddressLines(write) = %q, want %q", got, want)
	}
	for _, v := range []Verb{Send, Atomic} {
		if got, want := AddressLines(false, v, Dest{LID: 0x1234, QPN: 0xabcdef, PSN: 5, RKey: 7}, false),
			" local address: LID 0x1234 QPN 0xabcdef PSN 0x0005\n"; got != want {
			t.Errorf("AddressLines(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestMeasureLat(t *testing.T) {
	// Gaps 10..60 µs; the two largest are dropped: n = 4, median of 20 and
	// 30 is 25, "max" is the smallest dropped sample (50), the deviation is
	// sqrt((15²+5²+5²+15²)/4).
	s, err := MeasureLat(64, []int64{0, 10, 30, 60, 100, 150, 210}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := LatStats{Size: 64, Iters: 7, Min: 10, Max: 50, Typical: 25, Avg: 25, Stdev: math.Sqrt(125), P99: 50, P999: 50}
	if s != want {
		t.Errorf("MeasureLat = %+v, want %+v", s, want)
	}
	// Halved for a round trip: the deviation terms are truncated to
	// integers first (7² + 2² + 2² + 7²), as perftest does.
	s, err = MeasureLat(64, []int64{0, 10, 30, 60, 100, 150, 210}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	want = LatStats{Size: 64, Iters: 7, Min: 5, Max: 25, Typical: 12.5, Avg: 12.5, Stdev: math.Sqrt(106.0 / 4), P99: 25, P999: 25}
	if s != want {
		t.Errorf("MeasureLat(rtt) = %+v, want %+v", s, want)
	}
	// An odd count takes the middle sample; nanosecond units.
	s, err = MeasureLat(8, []int64{0, 1000, 3000, 6000, 10000, 15000}, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.Typical != 2 || s.Min != 1 || s.Max != 4 || s.Avg != 2 || s.P99 != 4 {
		t.Errorf("MeasureLat(odd) = %+v", s)
	}
	for _, bad := range [][]int64{nil, {0, 1, 2, 3}} {
		if _, err := MeasureLat(1, bad, 1, 2); err == nil {
			t.Errorf("MeasureLat(%v) succeeded", bad)
		}
	}
	if _, err := MeasureLat(1, make([]int64, 10), 1, 3); err == nil {
		t.Error("MeasureLat with RTT factor 3 succeeded")
	}
}

func TestMeasureBW(t *testing.T) {
	posted := []int64{0, 10, 20, 30}
	completed := []int64{100, 110, 120, 130}
	r, err := MeasureBW(1000, posted, completed, 1, 1e9, false)
	if err != nil {
		t.Fatal(err)
	}
	// Peak: the best per-message time over any stretch ending at a
	// completion is 130/4, cut to 32 units by perftest's integer division.
	want := Report{Size: 1000, Iters: 4, BWPeak: 1e12 / (32 * 1048576), BWAvg: 4e12 / (130 * 1048576), MsgRate: 4e9 / 130e6}
	if r != want {
		t.Errorf("MeasureBW = %+v, want %+v", r, want)
	}
	// With completions signalled every second message, the unsignalled last
	// one still counts: 140/5 = 28.
	r, err = MeasureBW(1000, []int64{0, 10, 20, 30, 40}, []int64{100, 110, 120, 130, 140}, 2, 1e9, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1e12 / (28 * 125e6); r.BWPeak != want {
		t.Errorf("MeasureBW peak = %v, want %v", r.BWPeak, want)
	}
	if _, err := MeasureBW(1, nil, nil, 1, 1, false); err == nil {
		t.Error("MeasureBW with no samples succeeded")
	}
	if _, err := MeasureBW(1, []int64{0}, []int64{1}, 0, 1, false); err == nil {
		t.Error("MeasureBW with cqMod 0 succeeded")
	}
}

func TestTestInfo(t *testing.T) {
	ti := TestInfo{Tool: WriteBW, Role: Client, Device: "rxe0", QPs: 1, Transport: "IB", Connection: "RC",
		PCIeRelaxOrder: "ON", WRAPI: true, TxDepth: 128, CQMod: 100, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1, InlineSize: 0}
	want := ResultLine +
		"                    RDMA_Write BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : rxe0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: ON\n" +
		" ibv_wr* API     : ON\n" +
		" TX depth        : 128\n" +
		" CQ Moderation   : 100\n" +
		" Mtu             : 1024[B]\n" +
		" Link type       : Ethernet\n" +
		" GID index       : 1\n" +
		" Max inline data : 0[B]\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	if got := ti.String(); got != want {
		t.Errorf("TestInfo:\n%s\nwant:\n%s", got, want)
	}
	ti = TestInfo{Tool: AtomicBW, Role: Server, AtomicType: "FETCH_AND_ADD", Device: "rxe0", QPs: 1, Transport: "IB", Connection: "RC",
		PCIeRelaxOrder: "ON", RelaxOrderWarning: true, CQMod: 100, MTU: MTU4096, LinkType: "Ethernet", GIDIndex: -1, OutReads: 128}
	want = ResultLine +
		"                    Atomic FETCH_AND_ADD BW Test\n" +
		" Dual-port       : OFF\t\tDevice         : rxe0\n" +
		" Number of qps   : 1\t\tTransport type : IB\n" +
		" Connection type : RC\t\tUsing SRQ      : OFF\n" +
		" PCIe relax order: ON\n" +
		" WARNING: CPU is not PCIe relaxed ordering compliant.\n" +
		" WARNING: You should disable PCIe RO with `--disable_pcie_relaxed` for both server and client.\n" +
		" ibv_wr* API     : OFF\n" +
		" CQ Moderation   : 100\n" +
		" Mtu             : 4096[B]\n" +
		" Link type       : Ethernet\n" +
		" Outstand reads  : 128\n" +
		" rdma_cm QPs\t : OFF\n" +
		" Data ex. method : Ethernet\n" +
		ResultLine
	if got := ti.String(); got != want {
		t.Errorf("TestInfo:\n%s\nwant:\n%s", got, want)
	}
	ti = TestInfo{Tool: SendLat, Role: Server, Device: "rxe0", QPs: 1, Transport: "IB", Connection: "RC", PCIeRelaxOrder: "ON",
		RxDepth: 512, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: -1, InlineSize: 236}
	got := ti.String()
	for _, line := range []string{"                    Send Latency Test\n", " RX depth        : 512\n", " Max inline data : 236[B]\n"} {
		if !strings.Contains(got, line) {
			t.Errorf("send_lat server info lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "CQ Moderation") || strings.Contains(got, "TX depth") {
		t.Errorf("send_lat server info has bw/client lines:\n%s", got)
	}
}

func TestLatDurLine(t *testing.T) {
	if got, want := LatDurHeader(), " #bytes        #iterations       t_avg[usec]    tps average\n"; got != want {
		t.Errorf("LatDurHeader = %q", got)
	}
	for _, tc := range []struct {
		s    LatDurStats
		want string
	}{
		{LatDurStats{2, 204304, 4.894, 102152}, " 2             204304            4.89           102152.00\n"},
		{LatDurStats{1048576, 0, math.Inf(1), 0}, " 1048576       0            inf            0.00   \n"},
		{LatDurStats{64, 12, 123456.789, 1.5}, " 64            12            123456.79        1.50   \n"},
	} {
		if got := LatDurLine(tc.s); got != tc.want {
			t.Errorf("LatDurLine(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
	// 1000 round trips in 2 s: 1 ms each, 1 ms per half; 500 per second.
	if got, want := MeasureLatDuration(8, 1000, 2, 2), (LatDurStats{8, 1000, 1000, 500}); got != want {
		t.Errorf("MeasureLatDuration = %+v, want %+v", got, want)
	}
	if got := MeasureLatDuration(8, 1000, 2, 1); got.Avg != 2000 || got.TPS != 500 {
		t.Errorf("MeasureLatDuration(read) = %+v", got)
	}
	if got := MeasureLatDuration(8, 0, 1, 2); !math.IsInf(got.Avg, 1) || got.TPS != 0 {
		t.Errorf("MeasureLatDuration(none) = %+v, want an infinite latency", got)
	}
}

func TestTestInfoDuplex(t *testing.T) {
	ti := TestInfo{Tool: SendBW, Role: Server, Device: "rxe0", QPs: 1, Transport: "IB", Connection: "UD", PCIeRelaxOrder: "ON",
		TxDepth: 128, RxDepth: 512, CQMod: 100, MTU: MTU1024, LinkType: "Ethernet", GIDIndex: 1, Duplex: true}
	got := ti.String()
	for _, line := range []string{"                    Send Bidirectional BW Test\n", " Connection type : UD\t\t",
		" TX depth        : 128\n RX depth        : 512\n CQ Moderation   : 100\n"} {
		if !strings.Contains(got, line) {
			t.Errorf("send_bw -b server info lacks %q:\n%s", line, got)
		}
	}
	ti.Tool, ti.Role = WriteBW, Client
	got = ti.String()
	if !strings.Contains(got, "RDMA_Write Bidirectional BW Test\n") || strings.Contains(got, "RX depth") {
		t.Errorf("write_bw -b client info:\n%s", got)
	}
}

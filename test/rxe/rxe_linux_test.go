package rxe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/uroce/uroce/bth"
)

// testContext bounds a privileged test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestImageCached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: building the rxe image needs root")
	}
	ctx := testContext(t)
	img, err := BuildImage(ctx, "")
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s (%s): cached=%v, builder ran %v", img.KVer, img.Dir, img.Cached, img.Took)
	// A second run finds the image current and leaves it alone.
	again, err := runBuilder(ctx, img.Kernel, false)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.Dir != img.Dir || again.KVer != img.KVer {
		t.Errorf("second build: cached=%v dir=%s kver=%s, want cached in %s (%s)", again.Cached, again.Dir, again.KVer, img.Dir, img.KVer)
	}
	t.Logf("cached builder run took %v", again.Took)
	manifest, err := os.ReadFile(filepath.Join(img.Dir, "manifest"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rdma_rxe.ko", "sch_netem.ko", "ib_uverbs.ko", "ibv_rc_pingpong", "ib_write_bw", "rping", " tc "} {
		if !strings.Contains(string(manifest), want) {
			t.Errorf("image manifest lacks %q:\n%s", want, manifest)
		}
	}
}

// TestPeerBoots boots one guest and checks what the interop tests rely on:
// rxe0 ACTIVE on eth0 with GID index 1 = ::ffff:192.0.2.1 (RoCE v2), path MTU
// 1024 at netdev MTU 1500, netem applied, the host veth reachable at its own
// MAC, the script's output free of boot messages and its status passed on.
func TestPeerBoots(t *testing.T) {
	n := NewNet(t, NetOptions{})
	ctx := testContext(t)
	host := n.AddHostVeth("uroce0", "192.0.2.3/24", 1500)
	ifi, err := n.Interface(host)
	if err != nil {
		t.Fatal(err)
	}
	p, err := n.StartPeer(ctx, PeerOptions{
		Name:  "A",
		IP:    "192.0.2.1/24",
		Netem: "delay 1ms",
		Script: `rxe-info
ibv_devinfo -d rxe0 -v
rdma link show rxe0/1
tc qdisc show dev eth0
ping -c 2 -W 5 192.0.2.3
ip neigh show 192.0.2.3
exit 7`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("guest %s (kernel %s) ready after %v", p.Name, p.Image.KVer, p.ReadyAfter())
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 {
		t.Errorf("exit code %d, want 7 (the script's)", res.ExitCode)
	}
	out := res.Output
	for _, re := range []string{
		`(?m)^rxe0 gid 1 0000:0000:0000:0000:0000:ffff:c000:0201 RoCE v2$`,
		`GID\[\s*1\]:\s+::ffff:192\.0\.2\.1, RoCE v2`,
		`active_mtu:\s+1024 \(3\)`,
		`link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0`,
		`qdisc netem \S+ root .*delay 1ms`,
		`2 packets transmitted, 2 packets received`,
		`(?m)^192\.0\.2\.3 dev eth0 lladdr ` + regexp.QuoteMeta(ifi.HardwareAddr.String()) + ` `,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s", re)
		}
	}
	if strings.Contains(out, "UROCE-RXE[") || strings.Contains(out, "READY") {
		t.Errorf("output holds console markers")
	}
	if !strings.Contains(p.Log(), "UROCE-RXE[A]: READY rxe0") {
		t.Errorf("log lacks the READY line")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestPairRCPingpong runs ibv_rc_pingpong between two guests and checks the
// RoCE traffic the bridge saw.
func TestPairRCPingpong(t *testing.T) {
	start := time.Now()
	n := NewNet(t, NetOptions{})
	ctx := testContext(t)
	pcap := filepath.Join(n.LogDir, "rc_pingpong.pcap")
	stop := n.Capture(t, pcap)

	const tool = "ibv_rc_pingpong -d rxe0 -g 1 -n 5 -s 64"
	srv, err := n.StartPeer(ctx, PeerOptions{Name: "server", IP: "192.0.2.1/24", Script: tool})
	if err != nil {
		t.Fatal(err)
	}
	// The client retries until the server listens.
	cli, err := n.StartPeer(ctx, PeerOptions{Name: "client", IP: "192.0.2.2/24", Script: "retry 150 " + tool + " 192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*Peer{srv, cli} {
		res, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: ready after %v, exit %d:\n%s", p.Name, p.ReadyAfter(), res.ExitCode, res.Output)
		if res.ExitCode != 0 {
			t.Errorf("%s exited %d", p.Name, res.ExitCode)
		}
		if !strings.Contains(res.Output, "5 iters in") {
			t.Errorf("%s output lacks the iteration report", p.Name)
		}
	}
	if st := stop(); !st.Complete() {
		t.Errorf("capture: %s", st)
	}
	t.Logf("pair run took %v (capture %s)", time.Since(start), pcap)

	// Every message is a SEND_ONLY answered by an ACK, in both directions.
	a, b := srv.Addr.Addr(), cli.Addr.Addr()
	type flow struct {
		src, dst netip.Addr
		op       bth.Opcode
	}
	counts := map[flow]int{}
	var seen []string
	roce := countRoCE(t, pcap, func(p *bth.Packet) {
		counts[flow{p.SrcIP(), p.DstIP(), p.Opcode()}]++
		seen = append(seen, fmt.Sprintf("%s>%s %v psn %d", p.SrcIP(), p.DstIP(), p.Opcode(), p.BTH().PSN()))
	})
	t.Logf("%d RoCE frames:\n%s", roce, strings.Join(seen, "\n"))
	for _, f := range []flow{
		{a, b, bth.OpSendOnly}, {b, a, bth.OpSendOnly},
		{a, b, bth.OpAck}, {b, a, bth.OpAck},
	} {
		if counts[f] < 5 {
			t.Errorf("%d %v frames %s -> %s, want at least 5", counts[f], f.op, f.src, f.dst)
		}
	}
}

// countRoCE reads a pcap file and calls fn for every RoCEv2 frame (UDP port
// 4791) in it, after checking that it parses and its ICRC is right. It
// returns how many there were.
func countRoCE(t *testing.T, file string, fn func(*bth.Packet)) int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("read %s: %v", file, err)
	}
	var p bth.Packet
	n := 0
	for i := 1; ; i++ {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: frame %d: %v", file, i, err)
		}
		switch err := bth.Parse(data, &p); {
		case errors.Is(err, bth.ErrNotRoCE):
			continue
		case err != nil:
			t.Errorf("%s: frame %d: %v", file, i, err)
			continue
		}
		if !p.ICRCOK() {
			t.Errorf("%s: frame %d: ICRC %08x, computed %08x", file, i, p.ICRC(), p.ComputeICRC())
		}
		n++
		fn(&p)
	}
	return n
}

// TestPeerTimeout checks that a guest outliving its timeout is killed and
// that Ready and Wait report it.
func TestPeerTimeout(t *testing.T) {
	n := NewNet(t, NetOptions{})
	ctx := testContext(t)
	p, err := n.StartPeer(ctx, PeerOptions{Timeout: 300 * time.Millisecond, Script: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr.String() != "192.0.2.1/24" || p.MAC.String() != "52:54:00:00:02:01" || p.Name != "rxe1" {
		t.Errorf("peer %s at %s with MAC %s, want rxe1 at 192.0.2.1/24 with 52:54:00:00:02:01", p.Name, p.Addr, p.MAC)
	}
	err = p.Ready(ctx)
	if !errors.Is(err, ErrPeerFailed) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Ready: %v, want a timeout failure", err)
	}
	res, err := p.Wait(ctx)
	if !errors.Is(err, ErrPeerFailed) {
		t.Errorf("Wait: %+v, %v; want a failure", res, err)
	}
	if !p.finished() {
		t.Errorf("QEMU still runs")
	}
	// Its address is free again for the next guest.
	n.mu.Lock()
	next, err := n.pickAddrLocked("")
	n.mu.Unlock()
	if err != nil || next.String() != "192.0.2.1/24" {
		t.Errorf("next address %v, %v; want 192.0.2.1/24", next, err)
	}
}

package demo

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/uroce/uroce/link/fault"
	"github.com/uroce/uroce/link/pipe"
	"github.com/uroce/uroce/stack"
)

var (
	macA = [6]byte{0x02, 0, 0, 0, 1, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 1, 0xb}
	ipA  = []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
	ipB  = []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")}
)

// pipePair opens two devices joined by an in-memory pipe, with faults on
// both transmit directions when fc is not nil.
func pipePair(t *testing.T, mtu int, fc *fault.Config) (a, b *stack.Device, fa, fb *fault.Link) {
	t.Helper()
	pa, pb := pipe.New(pipe.Config{MTU: mtu, Slots: 1024})
	var la, lb stack.Link = pa, pb
	if fc != nil {
		ca, cb := *fc, *fc
		cb.Seed++
		fa, fb = fault.Wrap(pa, ca), fault.Wrap(pb, cb)
		la, lb = fa, fb
	}
	nb := stack.StaticNeighbors{}
	for i := range ipA {
		nb[ipA[i]], nb[ipB[i]] = macA, macB
	}
	var err error
	if a, err = stack.Open(context.Background(), stack.Config{Link: la, MAC: macA, Addrs: ipA, Neighbors: nb}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = stack.Open(context.Background(), stack.Config{Link: lb, MAC: macB, Addrs: ipB, Neighbors: nb}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b, fa, fb
}

func TestExercisePipe(t *testing.T) {
	for _, c := range []struct {
		name string
		mtu  int
		v6   bool
		fc   *fault.Config
	}{
		{"ipv4-1500", 1500, false, nil},
		{"ipv6-9000", 9000, true, nil},
		{"faults", 1500, false, &fault.Config{Seed: 3, Drop: 0.02, Dup: 0.02, Reorder: 0.02, Corrupt: 0.02}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, fa, _ := pipePair(t, c.mtu, c.fc)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := Exercise(ctx, a, b, Workload{Size: 5000, Count: 100, Latency: 10, IPv6: c.v6, Lossy: c.fc != nil, LossWait: 50 * time.Millisecond, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != len(AllOps) {
				t.Fatalf("%d results", len(res))
			}
			for _, r := range res {
				if r.Messages+r.Lost != 100 {
					t.Errorf("%v: %d verified + %d lost of 100", r.Op, r.Messages, r.Lost)
				}
				if r.Op.reliable() && (r.Lost != 0 || r.Latency.N != 10) {
					t.Errorf("%v: %d lost, %d latency samples", r.Op, r.Lost, r.Latency.N)
				}
				t.Logf("%-18v %4d msgs %6d bytes each, %d lost, %d extra", r.Op, r.Messages, r.Size, r.Lost, r.Extra)
			}
			if c.fc != nil {
				st := fa.Stats()
				if st.Dropped == 0 || st.Corrupted == 0 || a.Counters().QP.RetransmittedPkts+b.Counters().QP.RetransmittedPkts == 0 {
					t.Errorf("faults were not exercised: %+v, retransmitted %d", st, a.Counters().QP.RetransmittedPkts)
				}
			}
		})
	}
}

// TestExerciseDetectsBadData shows that the checks fail when the data
// that arrived is not what was sent: one byte of one message is changed
// before it is checked.
func TestExerciseDetectsBadData(t *testing.T) {
	a, b, _, _ := pipePair(t, 1500, nil)
	for _, op := range []Op{RCSend, RCWrite, RCWriteImm, RCRead, RCCmpSwap, RCFetchAdd} {
		testTamper = func(o Op, i int, s *session) {
			if i != 7 {
				return
			}
			switch o {
			case RCRead, RCCmpSwap, RCFetchAdd:
				s.a.buf[s.slot(i)+3]++
			default:
				s.b.buf[s.slot(i)+3]++
			}
		}
		_, err := Exercise(context.Background(), a, b, Workload{Size: 3000, Count: 20, Latency: -1, Ops: []Op{op}})
		testTamper = nil
		if !errors.Is(err, ErrData) {
			t.Errorf("%v: %v, want ErrData", op, err)
		}
	}
}

func TestExerciseBadConfig(t *testing.T) {
	a, b, _, _ := pipePair(t, 1500, nil)
	for _, w := range []Workload{{Size: -1}, {Count: -5}, {Window: 1000}, {Ops: []Op{42}}} {
		if _, err := Exercise(context.Background(), a, b, w); err == nil {
			t.Errorf("%+v: no error", w)
		}
	}
	if _, err := Exercise(context.Background(), a, b, Workload{Count: 1, IPv6: true, Ops: []Op{RCWrite}}); err != nil {
		t.Errorf("ipv6: %v", err)
	}
}

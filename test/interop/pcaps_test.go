package interop

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/internal/pcaptool"
)

// capSummary is what a reference capture holds.
type capSummary struct {
	counts  pcaptool.Counts
	naks    map[string]int // NAK code names and RNR NAKs ("rnr"), by sender
	ops     map[string]int // "192.0.2.3 RC_SEND_ONLY"
	pads    map[int]int    // pad counts of packets with payload
	maxLoad int            // largest payload
	qkeys   map[uint32]int // DETH Q_Keys
	retrans int            // retransmissions found by the verifier
	sports  map[string]bool
	tcp     bool // an out-of-band exchange on port 18515
}

func summarize(t *testing.T, path string) *capSummary {
	t.Helper()
	s := &capSummary{naks: map[string]int{}, ops: map[string]int{}, pads: map[int]int{}, qkeys: map[uint32]int{}, sports: map[string]bool{}}
	v := pcaptool.NewVerifier(func(f *pcaptool.Finding) {
		switch f.Check {
		case "retransmission":
			s.retrans++
		}
		if f.Severity == pcaptool.SevError {
			t.Errorf("%s: frame %d: %s: %s", filepath.Base(path), f.Frame, f.Check, f.Message)
		}
	})
	var rec pcaptool.Record
	err := eachFrame(path, func(n int, f *pcaptool.Frame) {
		v.Frame(n, f)
		if len(f.Data) > 14+20+4 && f.Data[12] == 0x08 && f.Data[13] == 0 && f.Data[14+9] == 6 {
			ihl := int(f.Data[14]&15) * 4
			if tcp := f.Data[14+ihl:]; len(tcp) >= 4 {
				sp, dp := int(tcp[0])<<8|int(tcp[1]), int(tcp[2])<<8|int(tcp[3])
				if sp == 18515 || dp == 18515 {
					s.tcp = true
				}
			}
		}
		if !pcaptool.Decode(n, f, &rec) || !rec.HasBTH() || !rec.HeadersOK {
			return
		}
		p := &rec.P
		src := p.SrcIP().String()
		s.ops[src+" "+p.Info.Name]++
		s.sports[src+" "+strconv.Itoa(int(p.SrcPort()))] = true
		if p.PayloadN > 0 {
			s.pads[p.Pad]++
			s.maxLoad = max(s.maxLoad, p.PayloadN)
		}
		if d := p.DETH(); d != nil {
			s.qkeys[d.QKey()]++
		}
		if a := p.AETH(); a != nil {
			switch syn := a.Syndrome(); syn.Kind() {
			case bth.AckKindNAK:
				s.naks[src+" "+syn.CodeName()]++
			case bth.AckKindRNR:
				s.naks[src+" rnr"]++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	v.Finish() // the checks of whole CM exchanges
	s.counts = v.Counts
	return s
}

// eachFrame calls fn with each frame of the capture at path and its
// number (from 1).
func eachFrame(path string, fn func(n int, f *pcaptool.Frame)) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	r, err := pcaptool.NewReader(fh)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for n := 1; ; n++ {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: frame %d: %w", path, n, err)
		}
		fn(n, &f)
	}
}

// TestReferenceCaptures decodes the committed captures of pcaps/ and
// checks that each shows what pcaps/README.md says: every ICRC correct,
// no format error, and the packets that make its case.
func TestReferenceCaptures(t *testing.T) {
	dir := filepath.Join("..", "..", "pcaps", "rxe-6.1")
	const (
		u = "192.0.2.3 "
		x = "192.0.2.1 "
	)
	cases := map[string]func(t *testing.T, s *capSummary){
		"rc_pingpong-uroce_client.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[u+"RC_SEND_ONLY"] == 3 && s.ops[x+"RC_SEND_ONLY"] == 3, "three SEND_ONLYs each way: %v", s.ops)
			want(t, s.ops[u+"RC_ACKNOWLEDGE"] == 3 && s.ops[x+"RC_ACKNOWLEDGE"] == 3, "three ACKs each way: %v", s.ops)
			want(t, s.pads[3] == 6, "13-byte payloads padded by 3: %v", s.pads)
			want(t, s.sports[u+"49441"] && s.sports[x+"49441"], "both sides on UDP source port 49441: %v", s.sports)
		},
		"rc_pingpong-uroce_server.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[u+"RC_SEND_ONLY"] == 3 && s.ops[x+"RC_SEND_ONLY"] == 3, "three SEND_ONLYs each way: %v", s.ops)
			want(t, len(s.sports) == 2, "one UDP source port per side: %v", s.sports)
		},
		"ud_pingpong-uroce_server.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[u+"UD_SEND_ONLY"] == 3 && s.ops[x+"UD_SEND_ONLY"] == 3, "three UD SEND_ONLYs each way: %v", s.ops)
			want(t, s.qkeys[0x11111111] == 6, "Q_Key 0x11111111: %v", s.qkeys)
			want(t, s.sports[u+"57236"], "uroce's UDP source port 57236 (QPN 0x11): %v", s.sports)
		},
		"srq_pingpong-uroce_client.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[u+"RC_SEND_ONLY"] >= 4 && s.ops[x+"RC_SEND_ONLY"] >= 4, "SENDs both ways: %v", s.ops)
			want(t, len(s.sports) >= 4, "two QP pairs on their own UDP source ports: %v", s.sports)
		},
		"write_bw-uroce_client.pcap": func(t *testing.T, s *capSummary) {
			for _, op := range []string{"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST"} {
				want(t, s.ops[u+op] == 5, "five %s from uroce: %v", op, s.ops)
			}
			want(t, s.ops[x+"RC_ACKNOWLEDGE"] == 5, "five ACKs from rxe: %v", s.ops)
			want(t, s.maxLoad == 1024, "MTU 1024: largest payload %d", s.maxLoad)
		},
		"read_bw-uroce_server.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[x+"RC_RDMA_READ_REQUEST"] == 5, "five READ requests from rxe: %v", s.ops)
			for _, op := range []string{"RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST"} {
				want(t, s.ops[u+op] == 5, "five %s from uroce: %v", op, s.ops)
			}
		},
		"atomic_bw-uroce_server.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[x+"RC_FETCH_ADD"] == 5 && s.ops[u+"RC_ATOMIC_ACKNOWLEDGE"] == 5, "five FETCH_ADDs answered by uroce: %v", s.ops)
		},
		"send_lat-uroce_client.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.ops[u+"RC_SEND_ONLY"] == 5 && s.ops[x+"RC_SEND_ONLY"] == 5, "five SENDs each way: %v", s.ops)
		},
		"rnr-uroce_receiver.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.naks[u+"rnr"] > 0, "RNR NAKs from uroce: %v", s.naks)
			want(t, s.ops[x+"RC_SEND_ONLY"] > 5, "rxe resends its SENDs: %v", s.ops)
		},
		"bad_rkey-uroce_target.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.naks[u+"remote_access_error"] == 1, "one remote access error NAK from uroce: %v", s.naks)
			want(t, s.ops[x+"RC_RDMA_WRITE_ONLY"] >= 1, "WRITEs from rxe: %v", s.ops)
		},
		"retransmit-uroce_client.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.retrans > 0, "a retransmission")
			want(t, s.ops[u+"RC_SEND_ONLY"] == 5 && s.ops[x+"RC_SEND_ONLY"] > 5, "five SENDs from uroce on the wire, more from rxe: %v", s.ops)
		},
		"write_bw-mtu4096-uroce_server.pcap": func(t *testing.T, s *capSummary) {
			want(t, s.maxLoad == 4096, "MTU 4096: largest payload %d", s.maxLoad)
			want(t, s.ops[x+"RC_RDMA_WRITE_FIRST"] == 5 && s.ops[u+"RC_ACKNOWLEDGE"] == 5, "five WRITEs acknowledged by uroce: %v", s.ops)
		},
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("reference captures: %v", err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".pcap") {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			check, ok := cases[name]
			if !ok {
				t.Fatalf("no check for %s", name)
			}
			if !strings.Contains(string(readme), "`"+name+"`") {
				t.Errorf("pcaps/README.md does not describe %s", name)
			}
			if info, _ := e.Info(); info != nil && info.Size() > 64<<10 {
				t.Errorf("%s has %d bytes: keep reference captures small", name, info.Size())
			}
			s := summarize(t, filepath.Join(dir, name))
			if s.counts.RoCE == 0 || s.counts.ICRCOK != s.counts.RoCE || s.counts.Errors != 0 {
				t.Errorf("%s: %s, %d errors", name, s.counts.Summary(), s.counts.Errors)
			}
			want(t, s.tcp, "the out-of-band exchange on TCP 18515")
			check(t, s)
		})
	}
	if seen != len(cases) {
		t.Errorf("%d captures in %s, %d described here", seen, dir, len(cases))
	}
}

func want(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf("want "+format, args...)
	}
}

package mad

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// tsharkMADFields lists the fields of tshark's MAD and CM dissectors
// (tshark -G fields, the infiniband.mad and infiniband.cm prefixes).
func tsharkMADFields(t *testing.T, tshark string) []string {
	t.Helper()
	out, err := exec.Command(tshark, "-G", "fields").Output()
	if err != nil {
		t.Fatalf("tshark -G fields: %v", err)
	}
	var fields []string
	for _, line := range strings.Split(string(out), "\n") {
		cols := strings.Split(line, "\t")
		if len(cols) < 3 || cols[0] != "F" {
			continue
		}
		if f := cols[2]; f == "infiniband.mad" || strings.HasPrefix(f, "infiniband.mad.") || strings.HasPrefix(f, "infiniband.cm.") {
			fields = append(fields, f)
		}
	}
	if len(fields) < 50 {
		t.Fatalf("tshark knows only %d MAD and CM fields", len(fields))
	}
	return fields
}

// tsharkMADs runs tshark on a capture and returns, by frame number, the
// values of fields for every UD packet its InfiniBand dissector decodes
// as a CM MAD; a field that occurs several times has several values.
func tsharkMADs(t *testing.T, tshark, path string, fields []string) map[int]map[string][]string {
	t.Helper()
	args := []string{"-r", path, "-n", "-d", "udp.port==4791,infiniband",
		"-Y", "infiniband.mad.mgmtclass == 7 && infiniband.bth.opcode == 100",
		"-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;", "-e", "frame.number"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	// An empty home, so that no user preferences change the decoding.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %s: %v: %s", path, err, stderr.Bytes())
	}
	rows := map[int]map[string][]string{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) != len(fields)+1 {
			t.Fatalf("tshark %s: %d columns, want %d", path, len(cols), len(fields)+1)
		}
		n, err := strconv.Atoi(cols[0])
		if err != nil {
			t.Fatalf("tshark %s: frame number %q", path, cols[0])
		}
		row := map[string][]string{}
		for i, f := range fields {
			if cols[i+1] != "" {
				row[f] = strings.Split(cols[i+1], ";")
			}
		}
		rows[n] = row
	}
	return rows
}

// tsRow compares one MAD with tshark's values for it. Every field
// tshark gives must be compared (done tracks them).
type tsRow struct {
	t     *testing.T
	vals  map[string][]string
	done  map[string]bool
	diffs []string
}

func (r *tsRow) get(field string) ([]string, bool) {
	v, ok := r.vals[field]
	r.done[field] = true
	return v, ok
}

func (r *tsRow) fail(format string, args ...any) {
	r.diffs = append(r.diffs, fmt.Sprintf(format, args...))
}

func parseNum(s string) (uint64, error) {
	switch s {
	case "True":
		return 1, nil
	case "False":
		return 0, nil
	}
	return strconv.ParseUint(s, 0, 64)
}

// num compares a numeric field, occurrence by occurrence, with ours. A
// field may also match its entry in misread, the value tshark is known
// to show instead (0 entries mean none).
func (r *tsRow) num(field string, ours []uint64, misread []uint64) {
	v, ok := r.get(field)
	if !ok {
		r.fail("%s absent, ours %#x", field, ours)
		return
	}
	if len(v) != len(ours) {
		r.fail("%s occurs %d times (%q), ours %d", field, len(v), v, len(ours))
		return
	}
	for i, s := range v {
		n, err := parseNum(s)
		if err != nil {
			r.fail("%s: %q: %v", field, s, err)
			continue
		}
		if n != ours[i] && (misread == nil || n != misread[i]) {
			r.fail("%s %#x, tshark %#x", field, ours[i], n)
		}
	}
}

func (r *tsRow) n(field string, ours uint64) { r.num(field, []uint64{ours}, nil) }

func (r *tsRow) flag(field string, ours bool) {
	var v uint64
	if ours {
		v = 1
	}
	r.n(field, v)
}

// bytes compares a byte field with ours.
func (r *tsRow) bytes(field string, ours []byte) {
	v, ok := r.get(field)
	if !ok || len(v) != 1 {
		r.fail("%s: tshark %q", field, v)
		return
	}
	theirs, err := hex.DecodeString(strings.ReplaceAll(v[0], ":", ""))
	if err != nil {
		r.fail("%s: %q: %v", field, v[0], err)
		return
	}
	if !bytes.Equal(theirs, ours) {
		r.fail("%s %x, tshark %x", field, ours, theirs)
	}
}

// addr compares an address field (or its _ipv4 form, which tshark uses
// for an IPv4-mapped GID) with ours.
func (r *tsRow) addr(field string, ours netip.Addr) {
	v, ok := r.get(field)
	v4, ok4 := r.get(field + "_ipv4")
	if ok == ok4 {
		r.fail("%s: tshark %q, %q", field, v, v4)
		return
	}
	if ok4 {
		v = v4
	}
	a, err := netip.ParseAddr(v[0])
	if err != nil || a != ours.Unmap() && a != ours {
		r.fail("%s %v, tshark %q", field, ours, v[0])
	}
}

// TestTsharkCM compares every field of every CM MAD in the reference
// captures with tshark's MAD and CM dissectors, an implementation
// independent of this package: the same packets are CM MADs, and each
// field tshark shows has our value. tshark dissects REQ, REP, RTU, REJ,
// DREQ and DREP; the test skips without tshark.
func TestTsharkCM(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH (Debian package tshark)")
	}
	files := sharedPcaps(t)
	fields := tsharkMADFields(t, tshark)
	mads, compared, captures := 0, 0, 0
	for _, path := range files {
		ours := capturedMADs(t, path)
		if len(ours) == 0 {
			continue
		}
		captures++
		rows := tsharkMADs(t, tshark, path, fields)
		if len(rows) != len(ours) {
			t.Errorf("%s: %d CM MADs, tshark %d", path, len(ours), len(rows))
		}
		for _, c := range ours {
			vals := rows[c.frame]
			if vals == nil {
				t.Errorf("%s:%d: tshark sees no CM MAD", path, c.frame)
				continue
			}
			r := &tsRow{t: t, vals: vals, done: map[string]bool{}}
			compareMAD(r, c.m)
			var left []string
			for f := range vals {
				if !r.done[f] {
					left = append(left, f)
				}
			}
			sort.Strings(left)
			if len(left) > 0 {
				r.fail("tshark fields not compared: %v", left)
			}
			for _, d := range r.diffs {
				t.Errorf("%s:%d (%v): %s", filepath.Base(path), c.frame, c.m.AttrID(), d)
			}
			mads++
			compared += len(r.done)
		}
	}
	if mads == 0 {
		t.Fatal("no CM MAD compared")
	}
	t.Logf("%d CM MADs in %d captures agree with tshark (%d field values)", mads, captures, compared)
}

func compareMAD(r *tsRow, m MAD) {
	// The common header: tshark shows the 24 header bytes (or the
	// whole MAD) as one field, the data as another.
	if v, ok := r.get("infiniband.mad"); ok {
		theirs, _ := hex.DecodeString(strings.ReplaceAll(v[0], ":", ""))
		if (len(theirs) != HeaderLen && len(theirs) != Len) || !bytes.Equal(theirs, m[:len(theirs)]) {
			r.fail("infiniband.mad %x", theirs)
		}
	}
	r.n("infiniband.mad.baseversion", uint64(m.BaseVersion()))
	r.n("infiniband.mad.mgmtclass", uint64(m.Class()))
	r.n("infiniband.mad.classversion", uint64(m.ClassVersion()))
	r.n("infiniband.mad.method", uint64(m.Method()))
	r.n("infiniband.mad.status", uint64(m.Status()))
	r.n("infiniband.mad.classspecific", uint64(m.ClassSpecific()))
	r.n("infiniband.mad.transactionid", m.TID())
	r.n("infiniband.mad.attributeid", uint64(m.AttrID()))
	r.n("infiniband.mad.attributemodifier", uint64(m.AttrModifier()))
	r.bytes("infiniband.mad.data", m.Data())
	d := m.Data()
	switch m.AttrID() {
	case AttrREQ:
		compareREQ(r, REQ(d))
	case AttrREP:
		p := REP(d)
		r.n("infiniband.cm.rep", uint64(p.LocalCommID()))
		r.n("infiniband.cm.rep.remotecommid", uint64(p.RemoteCommID()))
		r.n("infiniband.cm.rep.localqkey", uint64(p.LocalQKey()))
		r.n("infiniband.cm.rep.localqpn", uint64(p.LocalQPN()))
		r.n("infiniband.cm.rep.localeecn", uint64(p.LocalEECN()))
		r.n("infiniband.cm.rep.startpsn", uint64(p.StartingPSN()))
		r.n("infiniband.cm.rep.respres", uint64(p.ResponderResources()))
		r.n("infiniband.cm.rep.initdepth", uint64(p.InitiatorDepth()))
		r.n("infiniband.cm.rep.tgtackdelay", uint64(p.TargetACKDelay()))
		r.n("infiniband.cm.rep.failoveracc", uint64(p.FailoverAccepted()))
		r.flag("infiniband.cm.rep.e2eflowctrl", p.EndToEndFlowControl())
		r.n("infiniband.cm.rep.rnrretrcount", uint64(p.RNRRetryCount()))
		r.flag("infiniband.cm.rep.srq", p.SRQ())
		r.n("infiniband.cm.rep.reserved", uint64(p.Fields().Reserved27))
		r.n("infiniband.cm.rep.localcaguid", p.LocalCAGUID())
		r.bytes("infiniband.cm.rep.private", p.PrivateData())
	case AttrRTU:
		p := RTU(d)
		r.n("infiniband.cm.rtu.localcommid", uint64(p.LocalCommID()))
		r.n("infiniband.cm.rtu.remotecommid", uint64(p.RemoteCommID()))
		r.bytes("infiniband.cm.rtu.private", p.PrivateData())
	case AttrREJ:
		p := REJ(d)
		f := p.Fields()
		r.n("infiniband.cm.rej.localcommid", uint64(p.LocalCommID()))
		r.n("infiniband.cm.rej.remotecommid", uint64(p.RemoteCommID()))
		r.n("infiniband.cm.rej.msgrej", uint64(p.MessageRejected()))
		r.n("infiniband.cm.rej.reserved0", uint64(f.Reserved8))
		r.n("infiniband.cm.rej.rejinfolen", uint64(p.RejectInfoLength()))
		r.n("infiniband.cm.rej.reserved1", uint64(f.Reserved9))
		r.n("infiniband.cm.rej.reason", uint64(p.Reason()))
		r.bytes("infiniband.cm.rej.ari", p.ARI())
		r.bytes("infiniband.cm.rej.private", p.PrivateData())
	case AttrDREQ:
		p := DREQ(d)
		r.n("infiniband.cm.dreq.localcommid", uint64(p.LocalCommID()))
		r.n("infiniband.cm.dreq.remotecommid", uint64(p.RemoteCommID()))
		r.n("infiniband.cm.req.remoteqpneecn", uint64(p.RemoteQPN())) // tshark files it under req
		r.bytes("infiniband.cm.dreq.private", p.PrivateData())
	case AttrDREP:
		p := DREP(d)
		r.n("infiniband.cm.drsp.localcommid", uint64(p.LocalCommID()))
		r.n("infiniband.cm.drsp.remotecommid", uint64(p.RemoteCommID()))
		r.bytes("infiniband.cm.drsp.private", p.PrivateData())
	default:
		r.fail("no comparison for attribute %v", m.AttrID())
	}
}

func compareREQ(r *tsRow, q REQ) {
	f := q.Fields()
	sid := uint64(q.ServiceID())
	r.n("infiniband.cm.req", uint64(q.LocalCommID()))
	r.n("infiniband.cm.req.serviceid", sid)
	if _, ok := r.vals["infiniband.cm.req.serviceid.prefix"]; ok {
		// The IP CM form of the service ID (Annex A11).
		r.bytes("infiniband.cm.req.serviceid.prefix", q[8:13])
		r.n("infiniband.cm.req.serviceid.protocol", sid>>16&0xff)
		r.n("infiniband.cm.req.serviceid.dport", uint64(q.ServiceID().Port()))
	}
	r.n("infiniband.cm.req.localcaguid", q.LocalCAGUID())
	r.n("infiniband.cm.req.localqkey", uint64(q.LocalQKey()))
	r.n("infiniband.cm.req.localqpn", uint64(q.LocalQPN()))
	r.n("infiniband.cm.req.responderres", uint64(q.ResponderResources()))
	r.n("infiniband.cm.req.localeecn", uint64(q.LocalEECN()))
	r.n("infiniband.cm.req.initdepth", uint64(q.InitiatorDepth()))
	r.n("infiniband.cm.req.remoteeecn", uint64(q.RemoteEECN()))
	r.n("infiniband.cm.req.remoteresptout", uint64(q.RemoteCMResponseTimeout()))
	r.n("infiniband.cm.req.transpsvctype", uint64(q.TransportType()))
	r.flag("infiniband.cm.req.e2eflowctrl", q.EndToEndFlowControl())
	r.n("infiniband.cm.req.startpsn", uint64(q.StartingPSN()))
	r.n("infiniband.cm.req.localresptout", uint64(q.LocalCMResponseTimeout()))
	r.n("infiniband.cm.req.retrcount", uint64(q.RetryCount()))
	r.n("infiniband.cm.req.pkey", uint64(q.PKey()))
	r.n("infiniband.cm.req.pppmtu", uint64(q.PathMTU()))
	r.flag("infiniband.cm.req.rdcexist", q.RDCExists())
	r.n("infiniband.cm.req.rnrretrcount", uint64(q.RNRRetryCount()))
	r.n("infiniband.cm.req.maxcmretr", uint64(q.MaxCMRetries()))
	r.flag("infiniband.cm.req.srq", q.SRQ())
	r.n("infiniband.cm.req.ext_transport", uint64(q.ExtTransportType()))
	for _, pa := range []struct {
		prefix string
		p      Path
		f      PathFields
	}{{"infiniband.cm.req.prim_", q.Primary(), f.Primary}, {"infiniband.cm.req.alt_", q.Alternate(), f.Alternate}} {
		p, pf, pre := pa.p, pa.f, pa.prefix
		r.n(pre+"locallid", uint64(p.LocalLID()))
		r.n(pre+"remotelid", uint64(p.RemoteLID()))
		if pre == "infiniband.cm.req.prim_" {
			r.addr(pre+"localgid", p.LocalGID())
			r.addr(pre+"remotegid", p.RemoteGID())
		} else {
			r.bytes(pre+"localgid", q[100:116]) // tshark shows the alternate GIDs as bytes
			r.bytes(pre+"remotegid", q[116:132])
		}
		// tshark 4.0 reads the flow label from the three bytes at the
		// word's start (showing its top 12 bits), and the reserved bits
		// and packet rate from the first byte alone: either reading is
		// accepted, the second derived from our flow label.
		fl := uint64(p.FlowLabel())
		r.num(pre+"flowlabel", []uint64{fl}, []uint64{fl >> 8})
		r.num(pre+"reserved0", []uint64{uint64(pf.Reserved0)}, []uint64{fl >> 18 & 3})
		r.num(pre+"pktrate", []uint64{uint64(p.PacketRate())}, []uint64{fl >> 12 & 0x3f})
		r.n(pre+"tfcclass", uint64(p.TrafficClass()))
		r.n(pre+"hoplim", uint64(p.HopLimit()))
		r.n(pre+"sl", uint64(p.SL()))
		r.flag(pre+"subnetlocal", p.SubnetLocal())
		r.n(pre+"localacktout", uint64(p.LocalACKTimeout()))
		if pre == "infiniband.cm.req.prim_" {
			r.n(pre+"reserved1", uint64(pf.Reserved1))
			r.n(pre+"reserved2", uint64(pf.Reserved2))
		} else {
			// tshark names the alternate path's last reserved bits
			// (SAP Supported among them) reserved1 too.
			r.num(pre+"reserved1", []uint64{uint64(pf.Reserved1), uint64(q[139] & 7)}, nil)
		}
	}
	if _, ok := r.vals["infiniband.cm.req.ip_cm"]; ok {
		h, ok := q.CMAHeader()
		if !ok {
			r.fail("tshark sees an IP CM header, we do not")
			return
		}
		hf := h.Fields()
		r.bytes("infiniband.cm.req.ip_cm", q.PrivateData())
		r.n("infiniband.cm.req.ip_cm.majv", uint64(h.Version()>>4))
		r.n("infiniband.cm.req.ip_cm.minv", uint64(h.Version()&15))
		r.n("infiniband.cm.req.ip_cm.ipv", uint64(h.IPVersion()))
		r.n("infiniband.cm.req.ip_cm.reserved", uint64(hf.Reserved))
		r.n("infiniband.cm.req.ip_cm.sport", uint64(h.SrcPort()))
		v := "4"
		if h.IPVersion() == 6 {
			v = "6"
		}
		for _, a := range []struct {
			field string
			ip    netip.Addr
		}{{"infiniband.cm.req.ip_cm.sip" + v, h.SrcIP()}, {"infiniband.cm.req.ip_cm.dip" + v, h.DstIP()}} {
			got, _ := r.get(a.field)
			if len(got) != 1 || got[0] != a.ip.String() {
				r.fail("%s %v, tshark %q", a.field, a.ip, got)
			}
		}
		r.bytes("infiniband.cm.req.ip_cm.private", q.PrivateData()[CMAHeaderLen:])
	} else {
		r.bytes("infiniband.cm.req.private", q.PrivateData())
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"sort"
	"time"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/proto"
)

func init() {
	register(&command{name: "stat", summary: "a running daemon's counters, clients and QPs (like rdma statistic and rdma resource)", run: runStat})
}

const statUsage = `usage: uroce stat [--json] [-d DEVICE] [--socket PATH] [--qp N]

Asks the uroce daemon serving DEVICE for its counters and prints, as
rdma statistic and rdma resource show qp do: a line with the device, its
network interface and the daemon's uptime; the device's counters, one
"name value" a line, sorted by name; one line per client session (id, pid,
uid, command, the objects it holds, its registered bytes); one line per QP
(qpn, type, state, PSNs, destination QP, owner). With --qp N only that QP
is listed, followed by its counters. --json prints all of it as one JSON
object instead (proto.Stat). Needs no privilege beyond access to the
daemon's socket.

flags:
`

func runStat(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("uroce stat", statUsage, stderr)
	jsonOut := fs.Bool("json", false, "print the statistics as indented JSON")
	name := fs.String("d", "uroce0", "device whose daemon to ask")
	socket := fs.String("socket", "", "the daemon's Unix socket (default /run/uroce/DEVICE.sock)")
	qpn := fs.Uint("qp", 0, "list only the QP with this number, with its counters (0: every QP)")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	if *qpn > 1<<24-1 {
		fmt.Fprintf(stderr, "uroce stat: --qp %d: a QP number has 24 bits\n", *qpn)
		fs.Usage()
		return 2
	}
	if *socket == "" {
		*socket = filepath.Join("/run/uroce", *name+".sock")
	}
	dev, err := client.Open(ctx, *socket)
	if err != nil {
		fmt.Fprintf(stderr, "uroce stat: %v\n", err)
		return 1
	}
	defer dev.Close()
	st, err := dev.Stat(uint32(*qpn))
	if err != nil {
		fmt.Fprintf(stderr, "uroce stat: %s: %v\n", *socket, err)
		return 1
	}
	st.Sessions = withoutSelf(st.Sessions, dev.Session())
	if *jsonOut {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "uroce stat: %v\n", err)
			return 1
		}
		stdout.Write(append(b, '\n'))
		return 0
	}
	writeStat(stdout, st, *qpn != 0)
	return 0
}

// withoutSelf leaves out the session this command opened to ask.
func withoutSelf(ss []proto.SessionStat, self uint32) []proto.SessionStat {
	for i, s := range ss {
		if s.ID == self {
			return append(ss[:i:i], ss[i+1:]...)
		}
	}
	return ss
}

// writeStat prints st as text; qpCounters adds each QP's counters after
// its line.
func writeStat(w io.Writer, st *proto.Stat, qpCounters bool) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	d := &st.Device
	up := time.Duration(d.Uptime * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(bw, "device %s netdev %s uptime %v\n", d.Name, d.Netdev, up)
	all := maps.Clone(d.Counters)
	maps.Copy(all, d.CM) // the CM agent's, cm_*
	writeCounters(bw, "", all)
	comm := map[uint32]string{}
	for _, s := range st.Sessions {
		comm[s.ID] = s.Comm
		fmt.Fprintf(bw, "session %d pid %d uid %d comm %s", s.ID, s.PID, s.UID, s.Comm)
		for _, k := range sortedKeys(s.Objects) {
			fmt.Fprintf(bw, " %s %d", k, s.Objects[k])
		}
		fmt.Fprintf(bw, " mr-bytes %d\n", s.MRBytes)
	}
	for _, q := range st.QPs {
		rate := ""
		if q.Rate > 0 {
			rate = fmt.Sprintf(" rate %.3fGbit/s", float64(q.Rate)/1e9) // DCQCN holds it back
		}
		fmt.Fprintf(bw, "qpn %d type %s state %s sq-psn %d rq-psn %d dest-qpn %d%s pid %d comm %s\n",
			q.QPN, q.Type, q.State, q.SQPSN, q.RQPSN, q.DestQPN, rate, q.PID, comm[q.Session])
		if qpCounters {
			writeCounters(bw, "    ", q.Counters)
		}
	}
}

func writeCounters(w io.Writer, indent string, c map[string]uint64) {
	for _, k := range sortedKeys(c) {
		fmt.Fprintf(w, "%s%s %d\n", indent, k, c[k])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

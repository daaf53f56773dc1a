package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/bth"
	"github.com/uroce/uroce/conform"
	"github.com/uroce/uroce/internal/oob"
	"github.com/uroce/uroce/internal/oob/pingpong"
	"github.com/uroce/uroce/replay"
)

// peerRegionSize is the size of conform_peer's region message:
// "RKEY:VA:LENGTH" in 8, 16 and 8 hex digits and a NUL.
const peerRegionSize = 35

// parsePeerRegion reads conform_peer's region message.
func parsePeerRegion(msg []byte) (rkey uint32, va uint64, length int, err error) {
	s := strings.TrimRight(string(msg), "\x00")
	f := strings.Split(s, ":")
	if len(msg) != peerRegionSize || len(f) != 3 || len(f[0]) != 8 || len(f[1]) != 16 || len(f[2]) != 8 {
		return 0, 0, 0, fmt.Errorf("conform_peer's region %q: want RKEY:VA:LENGTH in 8, 16 and 8 hex digits", s)
	}
	k, err1 := strconv.ParseUint(f[0], 16, 32)
	v, err2 := strconv.ParseUint(f[1], 16, 64)
	l, err3 := strconv.ParseUint(f[2], 16, 31)
	if err1 != nil || err2 != nil || err3 != nil || l == 0 {
		return 0, 0, 0, fmt.Errorf("conform_peer's region %q: want RKEY:VA:LENGTH in hex", s)
	}
	return uint32(k), v, int(l), nil
}

// runConformPeer runs s against conform_peer -S at addr, which the user
// starts again for each scenario with the command line printed: the
// pingpong exchange connects a QP of this end's to its QP, its region
// message names the region, and the bytes it writes after ('r' per
// receive completed) are its deliveries.
func runConformPeer(ctx context.Context, rp *rawPeer, addr string, s *conform.Scenario, n int, timeout time.Duration,
	tap func([]byte, bool), stderr io.Writer) (conform.Result, error) {
	res := conform.Result{Name: s.Name, Rule: s.Rule, IBTA: s.IBTA}
	ps, err := s.PeerServer()
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	fmt.Fprintf(stderr, "uroce conform: %s: connecting to the peer's `%s` at %s\n", s.Name, ps.Command("DEV", "GID-INDEX"), addr)
	nc, err := dialExchange(ctx, addr, "`"+ps.Command("DEV", "GID-INDEX")+"`")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	const psn = 0xfffffa // near the PSN wrap, as --self
	local := rp.local
	local.QPN = uint32(0x100 + n) // a QPN of its own: late packets of an earlier scenario are not its
	remote, err := pingpong.Client(ctx, nc, []pingpong.Dest{{QPN: local.QPN, PSN: psn, GID: local.IP.As16()}}, 1)
	if err != nil {
		return res, fmt.Errorf("the exchange with conform_peer: %w", err)
	}
	var msg [peerRegionSize]byte
	done := oob.Guard(ctx, nc)
	err = done(oob.ReadMsg(nc, msg[:]))
	if err != nil {
		return res, fmt.Errorf("conform_peer's region: %w", err)
	}
	rkey, va, length, err := parsePeerRegion(msg[:])
	if err != nil {
		return res, err
	}
	var delivered atomic.Int64
	go func() { // until nc is closed
		var b [64]byte
		for {
			k, err := nc.Read(b[:])
			for _, c := range b[:k] {
				if c == 'r' {
					delivered.Add(1)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	peer := rp.peer
	peer.QPN = remote[0].QPN
	env := conform.Env{Local: local, Peer: peer, PSN: psn, RKey: rkey, VA: va, Region: length, Timeout: timeout,
		PeerPSN: bth.PSN(remote[0].PSN & bth.PSNMask), QKey: conform.PeerProgramQKey, PeerDelivered: func() int { return int(delivered.Load()) }}
	run := conform.NewRun(s, env)
	err = replay.Drive(ctx, run, rp.raw.Link, tap)
	return run.Result(), err
}

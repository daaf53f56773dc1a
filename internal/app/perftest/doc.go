// Package perftest runs perftest's RDMA tools on a uroce device, wire
// compatible with Debian 12's perftest 4.5-0.17: ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat and ib_send_lat over
// RC, in either role. It is the library behind "uroce perf".
//
// The out-of-band exchange (versions, MTU, keys, barriers, reports) is
// package internal/oob/perftest; this package does the RDMA part the way
// perftest does it, because what goes on the wire depends on it:
//
//   - one buffer per test of INC(BUFF_SIZE(size, cycle buffer)) × 2 × QPs
//     bytes (message size, at least the agreed cycle buffer, rounded up to
//     the agreed cache line): QP i sends from offset i × BUFF_SIZE and
//     offers offset (QPs + i) × BUFF_SIZE to the peer (its key's VA);
//   - messages up to half a cycle buffer step through it, INC bytes at a
//     time, on both the local and the remote side, wrapping at the cycle
//     buffer, so RETH and AtomicETH addresses follow perftest's pattern;
//   - QP attributes: access rights by verb, path MTU agreed, max_dest_rd_atomic
//     this side's outstanding reads (1, or the device maximum for read and
//     atomic), min_rnr_timer 12, timeout 14 (-u), retry_cnt 7, rnr_retry 7,
//     max_rd_atomic the peer's outstanding reads; servers of the bandwidth
//     tests stay in RTR;
//   - bandwidth clients keep tx_depth requests in flight, signalling every
//     cq_mod-th and the last; ib_send_bw's server posts rx_depth receives
//     and reposts while messages are due; ib_write_lat's sides ping-pong
//     RDMA WRITEs (the server first) and watch their memory for the peer's
//     count in the last byte; ib_read_lat's client reads one message at a
//     time; ib_send_lat's sides ping-pong SENDs (the client first);
//   - the reports are computed as perftest's print_report_bw and
//     print_report_lat do, from the post and completion times (here from
//     the monotonic clock instead of the CPU's cycle counter, so -F changes
//     nothing), and printed in perftest's tables.
//
// With -R (Config.RDMACM, the in-process device only) the exchange and
// the test QPs' connections go over RDMA CM as perftest's do (see cm.go):
// the QP attributes are then rdma_cm's (the REQ's and REP's), not the
// ones above.
//
// Inline data (-I: WRITEs and SENDs of at most that many bytes go in the
// work request, IBV_SEND_INLINE) and post lists (-l: the bandwidth
// client posts whole lists of requests, the CQ moderation then the
// list's size unless -Q is given) are perftest's.
//
// -c UC runs the write and send tools over UC QPs (perftest refuses UC
// with READ, atomics and -R, and so does uroce).
//
// -c UD runs ib_send_bw and ib_send_lat over UD QPs, as perftest does:
// Q_Key 0x11111111 on both sides (not exchanged), the keys carrying the
// QPN and PSN, an address handle for the peer's GID where the side sends
// (its QPN and the Q_Key in every SEND); every receive is 40 bytes
// longer, for the GRH, and starts 40 bytes short of a cache line so that
// the message lands on one; the buffer has a cache line more. The message
// is at most the agreed MTU: after the MTU exchange a larger -s is
// refused ("Max message size in UD cannot be greater than MTU"), the
// default size and -a's sizes are cut to it (saying "Max msg size in UD
// is MTU"). As with UC the receiver posts a receive for every message
// (16000 at most); CQ moderation is not turned off for large sizes.
//
// -D SECONDS (with -f, the margins) runs a test for a time instead of
// -n, as perftest's duration mode does: what completes between the first
// and the last margin is counted. The bandwidth clients (with -b both
// sides) report the rate of their completions and ib_send_bw's server
// that of its receives (its clock starting with the first), without a
// peak; the latency tools print " #bytes #iterations t_avg[usec] tps
// average" instead of their statistics, the average being the sampled
// time over the iterations (halved for the ping-pongs), ib_send_lat's
// sides starting their clocks with their first receive. Receive depths
// are not cut to -n in duration mode.
//
// -b runs the bandwidth tools in both directions at once: both sides'
// QPs go to RTS and both run the client's loop (ib_send_bw's
// run_iter_bi: sending while counting and reposting receives, the server
// sending once the client's first message arrived, sends and receives
// completing on one CQ here); after each run the sides exchange their
// reports and each prints its own iterations with the sum of both
// sides' peak, average and message rate. ib_send_bw -b -D exchanges no
// reports: each side prints its own line, counting both directions.
// perftest refuses -b for the latency tools; uroce refuses -b and -c UD
// with -R too.
//
// Not implemented: SRQ, -z and events (-e is accepted, but not with -D,
// which perftest refuses: uroce always sleeps on its completion queues).
//
// uroce's own options: Config.BadRKey makes every RDMA operation of the
// test hit a key the peer does not have (a remote access error case),
// Config.SetRNRRetry replaces the rnr_retry of 7 (an RNR case with a
// finite retry count), Config.InfiniteRetry gives retry_cnt 7 rdma_rxe's
// meaning.
package perftest

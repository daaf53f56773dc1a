// Package perftest speaks the out-of-band TCP protocol of perftest 4.5 (as
// shipped by Debian 12, 4.5-0.17, which calls itself version "6.06"):
// ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat,
// ib_read_lat and ib_send_lat without RDMA CM, in both roles, and formats
// their report lines.
//
// Every exchange is symmetric: the client writes its message, then reads
// the server's; the server reads, then writes. Each message is one write(2)
// and is read with one read(2) by the stock tools, so each goes out here
// with one Write. The messages:
//
//	version      16 bytes  "6.06" NUL-padded; a peer below 5.70 is refused
//	cycle buffer  4 bytes  page size, big-endian; both use the larger
//	cache line   4 bytes  big-endian; both use the larger
//	MTU           2 bytes  the ibv_mtu enum as text, "3\0" (1024); both use
//	                       the smaller
//	key         108 bytes  "%04x:%04x:%06x:%06x:%08x:%016llx:" LID, out_reads,
//	                       QPN, PSN, R_Key, VA, then the 16 GID bytes as
//	                       "%02x:" each, then "%08x:" SRQN and NUL (59 bytes
//	                       without the GID on InfiniBand)
//	report     5×8 bytes   size, iterations, peak BW, average BW, message
//	                       rate; big-endian integers and IEEE doubles; each
//	                       field its own exchange
//	done          5 bytes  "done\0", sent by both sides without waiting
//
// A key round (ctx_hand_shake) hands over QP data the first time and is
// repeated as a barrier ("sync" here, always with QP 0's key). ib_write_bw
// with one QP, as captured between two rdma_rxe peers:
//
//	client                                          server
//	  |-- version, cycle buffer, cache line, MTU --->|  each answered in turn
//	  |<------------------- the same four -----------|
//	  |-- key -------------------------------------->|  keys: QP data
//	  |<------------------------------------- key ---|
//	QPs to RTR/RTS                               QPs to RTR/RTS
//	  |-- key ---------> / <------------------ key --|  keys again (printed)
//	  |-- key ---------> / <------------------ key --|  sync after RTR
//	RDMA WRITEs                                  waits in the next sync
//	  |-- key ---------> / <------------------ key --|  sync: the client is done
//	  |-- size -------> / <-------------------- size |  reports, five fields in
//	  |   … iters, peak, average, message rate …     |  turn; the server's are
//	  |                                              |  uninitialised memory
//	  |-- key ---------> / <------------------ key --|  sync before closing
//	  |-- "done" ----------->|<------------ "done" --|  both, without waiting
//	close                                        close
//
// The other tools differ in where the barriers sit (Sequence lists each
// tool's steps): ib_send_bw and ib_send_lat put the sync after RTR before
// the second key round and start every run with a sync (ib_send_bw -a also
// ends each with one), and exchange no reports; ib_write_lat and ib_read_lat
// begin with an extra round and exchange no reports; ib_write_lat has no
// closing exchange at all; ib_read_lat's server closes (sync, done) at once
// and so waits in that sync while the client reads.
//
// Conn offers each exchange as a method (Negotiate, HandShake,
// ExchangeReports, Done). Run drives a whole tool's Sequence and calls the
// caller's Hooks where the RDMA work goes: creating the QPs once the MTU is
// agreed, connecting them, and each measured run. BWHeader, BWLine,
// LatHeader, LatLine, AddressLines and TestInfo print what the tools print;
// MeasureBW and MeasureLat compute the figures as perftest does.
//
// With -R (Config.CM) the same messages go as SENDs over an rdma_cm
// connection instead of TCP, the keys in their binary form (CMKeySize
// bytes, AppendCMKey); two barriers with zero keys surround the test QPs'
// rdma_cm connection (StepCMConnect), and there is no "done".
//
// With -b (Config.Duplex) both sides run every measured run: ib_write_bw,
// ib_read_bw and ib_atomic_bw put a barrier before each run (and with -a
// one after it), then the reports, both sides' being real; ib_send_bw
// keeps its runs and exchanges the reports after each, except in
// duration mode (Config.Duration). Hooks.Reported receives the peer's.
// UD QPs (-c UD) change nothing in the exchange; Hooks.Agreed lets the
// caller cut the message sizes, and so the runs, to the agreed MTU.
//
// Not implemented: -z (rdma_cm exchange with QPs connected by their
// keys), per-port reports, DC and XRC, and the binary parameter exchange
// of perftest 6.28 and later (such a peer skips it when this side
// advertises 6.06).
package perftest

// Package pingpong runs rdma-core's ping-pong examples on a uroce device:
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong,
// in either role, so that a stock tool on an RDMA peer cannot tell uroce
// from its own kind. It is the library behind "uroce pingpong".
//
// Run does what the stock tool of Config.Tool does, step for step (rdma-core
// 44, libibverbs/examples):
//
//   - one buffer of -s bytes (ud: 40 more for the GRH slot), filled with
//     0x7b (srq: zeros), registered for local write; one CQ of rx_depth+1
//     entries (srq: rx_depth+num_qp); one QP (srq: num_qp QPs on one SRQ)
//     with one send WR and rx_depth receives;
//   - QPs to INIT (ud: Q_Key 0x11111111), rx_depth receives posted, each
//     covering the whole buffer;
//   - the local address line(s) printed, the TCP exchange (package
//     internal/oob/pingpong), the remote line(s) printed;
//   - QPs to RTR and RTS with the tools' attributes: rc and srq: path MTU
//     from -m, max_dest_rd_atomic 1, min_rnr_timer 12, timeout 14,
//     retry_cnt 7, rnr_retry 7, max_rd_atomic 1; uc: path MTU, no
//     reliability attributes; ud: an address handle instead. The server
//     connects before it replies, the client after;
//   - the client sends first; each side sends again once its previous
//     send completed and a message arrived, until -n exchanges are done,
//     refilling the receive queue when it runs low, exactly as the tools'
//     completion loop does (per QP with srq);
//   - the two result lines, and with -c the server's page check.
//
// Unlike the stock tools, rc and srq keep their QPs for Linger after the
// last exchange: the peer may still wait for the ACK of its last message
// (the rc client ends on a receive; with srq either side may), and if that
// ACK is lost the peer's retries deserve an answer (rdma_rxe retries
// forever).
//
// Where the tools need a GID index on RoCE (-g), Run defaults to the
// device's first IPv4 GID instead of sending a zero GID. Retry count 7
// keeps its IBTA meaning (seven retries) unless Config.InfiniteRetry asks
// for rdma_rxe's reading (retry forever): the tools set 7 only as the
// largest value, and a peer that vanished should end the test with
// "transport retry counter exceeded", not hang it.
//
// Config.Verify (not in the stock tools) checks every received message
// byte for byte against what a stock peer sends: the 0x7b fill (zeros for
// srq), with a zero byte at each 4096-byte page start when the client runs
// with -c, and that its length is -s.
package pingpong

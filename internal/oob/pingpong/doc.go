// Package pingpong speaks the out-of-band TCP exchange of rdma-core's
// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong
// (port 18515 by default), in both roles, and formats the lines those tools
// print.
//
// Each side describes its queue pair in a 52-byte text message,
// "%04x:%06x:%06x:%s" and a NUL: LID, QPN, PSN, and the GID as 32 hex
// digits in network byte order (LID 0 and ::ffff:a.b.c.d on RoCEv2). The
// client speaks first; the server moves its QP to RTR/RTS before it replies,
// so that the client may send as soon as it has the reply:
//
//	client                                   server
//	  |                                        | listen, accept one connection
//	  |--- address ("0000:000012:55a9b8:…\0") ->|
//	  |                                        | connect hook: QP to RTR/RTS
//	  |<-- address ("0000:000011:6d5ff9:…\0") --|
//	  |--- "done\0" --------------------------->|
//	close; QP to RTR/RTS                      close
//
// ibv_srq_pingpong sends one message per slot of its QP table, 256 each
// way whatever its -q, the unused slots as zero addresses
// ("0000:000000:000000:000…0\0"); its peers read them in a loop. The other
// tools send one message and read the reply with a single read(2), so each
// message here goes out with one Write.
//
// Client and Server carry out the exchange; the caller supplies its own
// addresses and, on the server, the hook that connects the QPs, and does the
// RDMA part itself. LocalAddressLine, RemoteAddressLine and ResultLines
// print what the tools print.
package pingpong

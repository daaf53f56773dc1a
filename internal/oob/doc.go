// Package oob holds what the out-of-band exchanges of the stock RDMA tools
// share: the TCP port they use (18515), connection set-up for both roles,
// context handling on the connection, and the hex fields and GIDs of their
// messages.
//
// The exchanges themselves are in the subpackages: pingpong for rdma-core's
// ibv_{rc,uc,ud,srq}_pingpong and perftest for perftest 4.5's ib_*_bw and
// ib_*_lat tools. They speak the tools' byte formats over any net.Conn and
// never touch RDMA: the caller supplies its queue pair's addresses and gets
// the peer's back, and does its RDMA work between the explicit steps.
//
// The connection must buffer like TCP does: in some steps both sides write
// before they read (perftest's final "done"), which deadlocks on an
// unbuffered net.Pipe.
package oob

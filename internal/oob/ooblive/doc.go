// Package ooblive checks the out-of-band exchanges of packages pingpong and
// perftest against the stock tools themselves, run by rdma_rxe guests of
// test/rxe. It has tests only. No RDMA traffic is involved: the tools are
// driven to the end of their exchange (servers) or to the point where they
// start their RDMA traffic (clients), and what they print about the peer is
// compared with what this side sent.
package ooblive

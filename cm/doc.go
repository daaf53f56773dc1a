// Package cm is the InfiniBand communication manager's connection
// protocol (IBTA vol 1, chapter 12) as a sans-I/O state machine: the
// REQ/MRA/REP/RTU handshake that sets up a reliable (or unreliable)
// connection, REJ, and the DREQ/DREP release, with the response
// timeouts, retries, duplicate detection and TimeWait of §12.9.
//
// A Machine takes three kinds of input:
//
//   - received MADs, with the address they came from (Receive);
//   - the application's calls: Listen, Connect with a REQ's values,
//     Accept with a REP's, Reject, ReadyToUse, Disconnect;
//   - clock ticks: the caller asks Deadline and calls Tick at (or after)
//     that time, with an injected Time, as package qp does.
//
// and produces two kinds of output, which the caller drains after each
// input: MADs to send to an address (Sends) and events for the
// application (Events): a connection request with its private data, a
// reply to move the QP to RTR/RTS on, established, rejected with reason
// and private data, a disconnect request, disconnected, timeout.
//
// The machine does no I/O, starts no goroutine and is not safe for
// concurrent use: its owner (package rdmacm's agent, or a test) calls it
// from one goroutine, or under a lock.
//
// # Bounds
//
// A peer's MADs never grow state without bound: connections are capped
// (Config.MaxConns), so are passive connections the application has not
// answered yet (Config.MaxPending), and the output queues
// (Config.MaxQueued). What does not fit is refused (a REJ "no
// resources" for a REQ) or dropped, and counted (Counters).
//
// QPAttrsFor derives the local QP's RTR and RTS attributes from a REQ and a
// REP (§12.7.x, the fields a CM passes to the verbs modify-QP calls).
package cm

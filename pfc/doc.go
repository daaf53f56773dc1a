// Package pfc reads and builds Ethernet MAC Control frames of the two
// flow-control kinds, IEEE 802.3 PAUSE (802.3x, Annex 31B) and IEEE
// 802.1Qbb priority-based flow control (PFC: IEEE 802.1Q clause 36,
// IEEE 802.3 Annex 31D), and keeps a transmitter's pause state.
//
// # Frames
//
// A MAC Control frame (IEEE 802.3 clause 31) has EtherType 0x8808 and a
// 16-bit opcode (Annex 31A); PAUSE is opcode 0x0001, PFC 0x0101. Both are
// sent to the reserved multicast address 01-80-C2-00-00-01 and padded
// with zeros to the minimum frame of 60 octets without the FCS (64 with
// it, minFrameSize of 802.3 4.4.2). Offsets below count from the start
// of the frame; an 802.1Q tag (0x8100 and the TCI) between the source
// address and the EtherType moves everything after it by 4.
//
//	 0               1               2               3
//	+---------------+---------------+---------------+---------------+
//	|          Destination address 01-80-C2-00-00-01                |  0
//	+                               +-------------------------------+
//	|                               |                               |  4
//	+-------------------------------+                               +
//	|                        Source address                         |  8
//	+-------------------------------+-------------------------------+
//	|       EtherType 0x8808        |            Opcode             | 12
//	+-------------------------------+-------------------------------+
//
// PAUSE (Annex 31B) carries one pause time for the whole link:
//
//	+-------------------------------+-------------------------------+
//	|          pause_time           |    42 octets of zero pad ...  | 16
//	+-------------------------------+-------------------------------+
//
// PFC (802.1Q clause 36, 802.3 Annex 31D) carries the priority-enable vector,
// whose high octet is reserved and whose bit n (e[n], bit 0 the least
// significant) says that time[n] is meant for priority n, and eight
// times, one per priority:
//
//	+---------------+---------------+-------------------------------+
//	|   reserved    |e7 e6 ... e1 e0|            time[0]            | 16
//	+---------------+---------------+-------------------------------+
//	|            time[1]            |            time[2]            | 20
//	+-------------------------------+-------------------------------+
//	|            time[3]            |            time[4]            | 24
//	+-------------------------------+-------------------------------+
//	|            time[5]            |            time[6]            | 28
//	+-------------------------------+-------------------------------+
//	|            time[7]            |    26 octets of zero pad ...  | 32
//	+-------------------------------+-------------------------------+
//
// Times are in pause quanta of 512 bit times at the link's speed
// (QuantaDuration): 65535 quanta are 3.36 ms at 10 Gbit/s, 336 µs at
// 100 Gbit/s. A time of 0 ends the pause at once.
//
// # What Parse accepts
//
// Parse takes the frame from its Ethernet header, with or without one
// 802.1Q tag, and with any padding after the fields (a capture may add
// the FCS). It refuses a frame shorter than 60 octets (ErrTooShort: a
// receiving MAC discards it as a fragment) and an opcode other than
// PAUSE and PFC (ErrUnknownOpcode); both still leave the addresses, the
// tag and, where present, the opcode readable. The destination address
// is not checked: 802.3 also acts on a PAUSE sent to the station's own
// unicast address, which only the caller knows (Frame.DstReserved tells
// the reserved address apart). The pad and the reserved octet of the
// enable vector are ignored, as receivers must.
//
// # Pause state
//
// Pauser is the receiving side's state as a transmitter sees it: which
// of the eight priorities it may not send on, and until when. It is
// sans-I/O: frames and the time come in as arguments, the clock is the
// caller's, nothing runs in the background. A PFC frame restarts the
// timer of every priority whose enable bit is set with that priority's
// time, replacing what was left of it (a new frame overrides the old
// one, also with a shorter time); a PAUSE frame does
// the same to one link-wide timer that holds back every priority. The
// two are kept apart, as their counters are on mlx5 NICs. The owner
// checks Paused before sending on a priority, sleeps until Deadline and
// then calls Tick.
package pfc

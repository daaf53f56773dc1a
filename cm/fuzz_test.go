package cm

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/uroce/uroce/mad"
)

// fuzzSeeds are one small MAD of each CM message (built, not captured).
func fuzzSeeds(f *testing.F) {
	r := testREQ(0x11)
	r.LocalCommID = 0x1234
	for _, b := range [][mad.Len]byte{
		build(mad.AttrREQ, 1, &r),
		build(mad.AttrMRA, 1, &mad.MRAFields{LocalCommID: 0x1234, ServiceTimeout: 3}),
		build(mad.AttrREJ, 1, &mad.REJFields{RemoteCommID: 0x1234, Reason: mad.RejConsumer}),
		build(mad.AttrREP, 1, &mad.REPFields{LocalCommID: 9, RemoteCommID: 0x1234, LocalQPN: 0x22}),
		build(mad.AttrRTU, 1, &mad.RTUFields{LocalCommID: 0x1234, RemoteCommID: 9}),
		build(mad.AttrDREQ, 1, &mad.DREQFields{LocalCommID: 0x1234, RemoteCommID: 9, RemoteQPN: 0x22}),
		build(mad.AttrDREP, 1, &mad.DREPFields{LocalCommID: 9, RemoteCommID: 0x1234}),
		build(mad.AttrSIDRREQ, 1, &mad.SIDRREQFields{RequestID: 0x1234, PKey: 0xffff, ServiceID: sid}),
		build(mad.AttrSIDRREP, 1, &mad.SIDRREPFields{RequestID: 0x1234, QPN: 0x22, QKey: 1, ServiceID: sid}),
	} {
		f.Add(b[:], uint8(0), uint16(0))
	}
	f.Add([]byte{1, 7, 2, 3}, uint8(1), uint16(5)) // truncated
}

// fuzzFeed feeds the input (and, to reach deeper states, copies of it
// aimed at the machine's connections) and clock ticks, checking the
// invariants after each step.
func fuzzFeed(t *testing.T, m *Machine, b []byte, op uint8, dt uint16) {
	now := time.Second
	for i := 0; i < 4; i++ {
		in := append([]byte(nil), b...)
		if len(in) >= mad.Len && op&(1<<i) != 0 {
			for id := range m.conns { // address a connection of the machine
				// Every CM message has the receiver's ID at data byte 4.
				binary.BigEndian.PutUint32(in[mad.HeaderLen+4:], uint32(id))
				break
			}
		}
		m.Receive(now, ipB, in)
		checkInvariants(t, m)
		for _, e := range m.Events(nil) { // an application that says yes
			switch e.Type {
			case EventRequest:
				m.Accept(now, e.ID, Answer(e.REQ, 0x22, 1, 1, 1, 7, 0))
			case EventReply:
				m.ReadyToUse(now, e.ID, nil)
			case EventDisconnectRequest:
				m.Disconnect(now, e.ID, nil)
			}
		}
		m.Sends(nil)
		now += time.Duration(dt) * time.Millisecond
		m.Tick(now)
		checkInvariants(t, m)
	}
	// Everything ends: time alone brings the machine back to empty.
	for j := 0; m.Len() > 0; j++ {
		d, ok := m.Deadline()
		if !ok {
			// Established connections wait for the application.
			for id, c := range m.conns {
				if c.state == Established || c.state == DREQRcvd || c.state == MRARepSent {
					m.Disconnect(now, id, nil)
					if c.state == MRARepSent {
						m.ReadyToUse(now, id, nil)
					}
				}
			}
			if _, ok := m.Deadline(); !ok {
				t.Fatalf("stuck with %d conns and no deadline", m.Len())
			}
			continue
		}
		if j > 1000 {
			t.Fatal("connections never go away")
		}
		now = max(now, d)
		m.Tick(now)
		m.Events(nil)
		m.Sends(nil)
		checkInvariants(t, m)
	}
}

// FuzzListener feeds arbitrary MADs to a machine that listens.
func FuzzListener(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte, op uint8, dt uint16) {
		m := New(Config{Rand: rand.New(rand.NewPCG(1, 2)), MaxConns: 16, MaxPending: 4})
		m.Listen(sid)
		fuzzFeed(t, m, b, op, dt)
	})
}

// FuzzConnecting feeds arbitrary MADs to a machine with a connection
// in REQ_SENT (the input is aimed at it when op says so).
func FuzzConnecting(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte, op uint8, dt uint16) {
		m := New(Config{Rand: rand.New(rand.NewPCG(1, 2)), MaxConns: 16, MaxPending: 4})
		if _, err := m.Connect(time.Second, ipB, testREQ(0x11)); err != nil {
			t.Fatal(err)
		}
		m.Sends(nil)
		fuzzFeed(t, m, b, op, dt)
	})
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/uroce/uroce/internal/netns"
)

// What users would otherwise run between the same two hosts: the
// kernel's TCP and UDP, on the same veth pair, in the same rounds.

const kernelPort = 5201

// listenIn opens a listening TCP or UDP socket in ns (a socket belongs to
// the namespace it was made in; it is then used from any thread).
func listenIn(ns *netns.Namespace, network string, addr netip.AddrPort) (l net.Listener, pc net.PacketConn, err error) {
	err = ns.Do(func() error {
		var err error
		if network == "udp" {
			pc, err = net.ListenPacket("udp", addr.String())
		} else {
			l, err = net.Listen("tcp", addr.String())
		}
		return err
	})
	return l, pc, err
}

func dialIn(ctx context.Context, ns *netns.Namespace, network string, addr netip.AddrPort) (c net.Conn, err error) {
	err = ns.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr.String())
		return err
	})
	return c, err
}

// tcpStream sends one TCP stream from A to B for d (after a tenth of it to
// warm up) with 1 MiB writes, as iperf3 does with large buffers, and
// returns the goodput in bits per second and the bytes counted.
func tcpStream(ctx context.Context, pair *netns.Pair, d time.Duration) (float64, uint64, error) {
	ln, _, err := listenIn(pair.B, "tcp", netip.AddrPortFrom(addrB, kernelPort))
	if err != nil {
		return 0, 0, fmt.Errorf("kernel tcp: listen: %w", err)
	}
	defer ln.Close()
	var got atomic.Uint64
	rerr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rerr <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 1<<20)
		for {
			n, err := c.Read(buf)
			got.Add(uint64(n))
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				rerr <- err
				return
			}
		}
	}()
	c, err := dialIn(ctx, pair.A, "tcp", netip.AddrPortFrom(addrB, kernelPort))
	if err != nil {
		return 0, 0, fmt.Errorf("kernel tcp: connect: %w", err)
	}
	buf := make([]byte, 1<<20)
	werr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				werr <- nil
				return
			default:
			}
			if _, err := c.Write(buf); err != nil {
				werr <- err
				return
			}
		}
	}()
	sleep(ctx, d/10)
	b0, t0 := got.Load(), time.Now()
	sleep(ctx, d)
	b1, t1 := got.Load(), time.Now()
	close(stop)
	err = <-werr
	c.Close()
	if e := <-rerr; err == nil {
		err = e
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kernel tcp: %w", err)
	}
	return float64(b1-b0) * 8 / t1.Sub(t0).Seconds(), b1 - b0, ctx.Err()
}

// udpRate sends size-byte UDP datagrams from A to B as fast as one
// sender goroutine can for d (after a tenth of it to warm up) and returns
// how many arrived per second.
func udpRate(ctx context.Context, pair *netns.Pair, size int, d time.Duration) (float64, error) {
	addr := netip.AddrPortFrom(addrB, kernelPort+2)
	_, pc, err := listenIn(pair.B, "udp", addr)
	if err != nil {
		return 0, fmt.Errorf("kernel udp: listen: %w", err)
	}
	defer pc.Close()
	if uc, ok := pc.(*net.UDPConn); ok {
		uc.SetReadBuffer(8 << 20)
	}
	var got atomic.Uint64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	c, err := dialIn(ctx, pair.A, "udp", addr)
	if err != nil {
		return 0, fmt.Errorf("kernel udp: connect: %w", err)
	}
	defer c.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		msg := make([]byte, size)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.Write(msg) // a full socket buffer drops: the receiver counts
		}
	}()
	sleep(ctx, d/10)
	n0, t0 := got.Load(), time.Now()
	sleep(ctx, d)
	n1, t1 := got.Load(), time.Now()
	close(stop)
	<-done
	return float64(n1-n0) / t1.Sub(t0).Seconds(), ctx.Err()
}

// pingPong measures size-byte ping-pongs over the kernel's UDP or TCP
// from A to B and back: half round trips, as ib_write_lat reports.
func pingPong(ctx context.Context, pair *netns.Pair, network string, size, warmup, iters int) ([]time.Duration, error) {
	addr := netip.AddrPortFrom(addrB, kernelPort+1)
	ln, pc, err := listenIn(pair.B, network, addr)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: listen: %w", network, err)
	}
	echoed := make(chan error, 1)
	if network == "udp" {
		defer pc.Close()
		go func() {
			buf := make([]byte, 65536)
			for i := 0; i < warmup+iters; i++ {
				n, from, err := pc.ReadFrom(buf)
				if err == nil {
					_, err = pc.WriteTo(buf[:n], from)
				}
				if err != nil {
					echoed <- err
					return
				}
			}
			echoed <- nil
		}()
	} else {
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				echoed <- err
				return
			}
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			buf := make([]byte, size)
			for i := 0; i < warmup+iters; i++ {
				if _, err := io.ReadFull(c, buf); err != nil {
					echoed <- err
					return
				}
				if _, err := c.Write(buf); err != nil {
					echoed <- err
					return
				}
			}
			echoed <- nil
		}()
	}
	c, err := dialIn(ctx, pair.A, network, addr)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: connect: %w", network, err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	msg, back := make([]byte, size), make([]byte, size)
	samples := make([]time.Duration, 0, iters)
	c.SetDeadline(time.Now().Add(time.Minute))
	for i := 0; i < warmup+iters; i++ {
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", network, err)
		}
		if _, err := io.ReadFull(c, back); err != nil {
			return nil, fmt.Errorf("kernel %s: %w (a datagram lost?)", network, err)
		}
		if i >= warmup {
			samples = append(samples, time.Since(t0)/2)
		}
	}
	if err := <-echoed; err != nil {
		return nil, fmt.Errorf("kernel %s: echo: %w", network, err)
	}
	slices.Sort(samples)
	return samples, nil
}

// cpuBusy returns the CPU time the whole machine has spent busy (user,
// system, interrupts, softirqs, steal), from /proc/stat: the process's
// and the kernel's work alike, softirqs of other tasks included.
func cpuBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy uint64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}

// cpuPerGB is the CPU seconds per gigabyte of payload moved.
func cpuPerGB(cpu time.Duration, bytes uint64) float64 {
	if bytes == 0 {
		return 0
	}
	return cpu.Seconds() / (float64(bytes) / 1e9)
}

package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// PairConfig describes a two-namespace test network; zero fields take the
// defaults documented on each.
type PairConfig struct {
	// Prefix starts both namespace names ("uroce" by default); the
	// namespaces are named Prefix-a-PID-N and Prefix-b-PID-N.
	Prefix string
	// MTU of both veth ends (1500 by default).
	MTU int
	// Queues is the number of RX and TX queues of each veth end (1 by
	// default).
	Queues int
	// DevA and DevB name the veth ends ("veth0" in A, "veth1" in B).
	DevA, DevB string
	// AddrA and AddrB are the addresses of each end. By default A has
	// 192.0.2.1/24 and 2001:db8::1/64, B has 192.0.2.2/24 and
	// 2001:db8::2/64. Both nil keeps the defaults; to configure no
	// address at all, set NoAddrs.
	AddrA, AddrB []netip.Prefix
	// NoAddrs leaves both ends without addresses.
	NoAddrs bool
}

// Pair is two namespaces joined by a veth pair, both ends up.
type Pair struct {
	A, B         *Namespace
	DevA, DevB   string
	AddrA, AddrB []netip.Prefix
	MACA, MACB   net.HardwareAddr
	// IndexA and IndexB are the interface indexes of the ends inside
	// their namespaces.
	IndexA, IndexB int
	MTU            int
}

// TestSysctls are applied to both namespaces of a Pair before the veth pair
// is created: ARP answered only for addresses of the receiving interface, and
// IPv6 duplicate-address detection off so addresses are usable at once.
var TestSysctls = [][2]string{
	{"net.ipv4.conf.all.arp_ignore", "1"},
	{"net.ipv4.conf.all.arp_announce", "2"},
	{"net.ipv6.conf.all.accept_dad", "0"},
	{"net.ipv6.conf.default.accept_dad", "0"},
}

// NewPair builds the network described by cfg. On failure everything created
// so far is removed. The caller removes the network with Close.
func NewPair(cfg PairConfig) (_ *Pair, err error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "uroce"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.DevA == "" {
		cfg.DevA = "veth0"
	}
	if cfg.DevB == "" {
		cfg.DevB = "veth1"
	}
	if !cfg.NoAddrs && cfg.AddrA == nil && cfg.AddrB == nil {
		cfg.AddrA = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("2001:db8::1/64")}
		cfg.AddrB = []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24"), netip.MustParsePrefix("2001:db8::2/64")}
	}
	if cfg.NoAddrs {
		cfg.AddrA, cfg.AddrB = nil, nil
	}
	for _, p := range append(append([]netip.Prefix(nil), cfg.AddrA...), cfg.AddrB...) {
		if !Allowed(p) {
			return nil, fmt.Errorf("create test network: %s: %w", p, ErrAddress)
		}
	}

	p := &Pair{DevA: cfg.DevA, DevB: cfg.DevB, AddrA: cfg.AddrA, AddrB: cfg.AddrB, MTU: cfg.MTU}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.A, err = New(cfg.Prefix + "-a"); err != nil {
		return nil, err
	}
	if p.B, err = New(cfg.Prefix + "-b"); err != nil {
		return nil, err
	}
	for _, ns := range []*Namespace{p.A, p.B} {
		for _, kv := range TestSysctls {
			if err = ns.Sysctl(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	if err = AddVeth(p.A, p.DevA, p.B, p.DevB, cfg.Queues); err != nil {
		return nil, err
	}
	ends := []struct {
		ns    *Namespace
		dev   string
		addrs []netip.Prefix
		mac   *net.HardwareAddr
		index *int
	}{
		{p.A, p.DevA, p.AddrA, &p.MACA, &p.IndexA},
		{p.B, p.DevB, p.AddrB, &p.MACB, &p.IndexB},
	}
	for _, e := range ends {
		if err = e.ns.SetMTU(e.dev, cfg.MTU); err != nil {
			return nil, err
		}
		for _, a := range e.addrs {
			if err = e.ns.AddAddr(e.dev, a); err != nil {
				return nil, err
			}
		}
		if err = e.ns.SetUp(e.dev); err != nil {
			return nil, err
		}
		ifi, ierr := e.ns.Interface(e.dev)
		if ierr != nil {
			return nil, ierr
		}
		*e.mac, *e.index = ifi.HardwareAddr, ifi.Index
	}
	return p, nil
}

// Close deletes both namespaces, and with them the veth pair.
func (p *Pair) Close() error {
	var errs []error
	if p.A != nil {
		errs = append(errs, p.A.Delete())
		p.A = nil
	}
	if p.B != nil {
		errs = append(errs, p.B.Delete())
		p.B = nil
	}
	return errors.Join(errs...)
}

package dcqcn

// NP is the DCQCN notification point of one QP (the receiver side): it
// decides when a CE-marked packet is answered with a CNP. The zero value
// answers every CE-marked packet; Init sets the spacing.
type NP struct {
	gap  Time // min_time_between_cnps
	sent bool // a CNP was sent, at last
	last Time
}

// Init sets the minimum time between two CNPs from p (nil means
// Defaults()) and forgets earlier CNPs.
func (n *NP) Init(p *Params) {
	if p == nil {
		d := Defaults()
		p = &d
	}
	*n = NP{gap: usec(p.MinTimeBetweenCNPs)}
}

// OnCE takes a CE-marked packet received at now and reports whether a CNP
// should be sent for it now: true at most once per min_time_between_cnps.
// A suppressed CNP is not sent later. The caller counts every call
// (np_ecn_marked_roce_packets) and every true (np_cnp_sent).
func (n *NP) OnCE(now Time) bool {
	if n.sent && now-n.last < n.gap {
		return false
	}
	n.sent, n.last = true, now
	return true
}

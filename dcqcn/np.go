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
	n.InitInterval(usec(p.MinTimeBetweenCNPs))
}

// InitInterval sets the minimum time between two CNPs and forgets
// earlier CNPs.
func (n *NP) InitInterval(gap Time) { *n = NP{gap: gap} }

// OnCE takes a CE-marked packet received at now and reports whether a CNP
// should be sent for it now: true at most once per min_time_between_cnps.
// A suppressed CNP is not sent later. The caller counts every call
// (np_ecn_marked_roce_packets) and every true (np_cnp_sent).
func (n *NP) OnCE(now Time) bool {
	if !n.Allows(now) {
		return false
	}
	n.Sent(now)
	return true
}

// Allows reports whether a CNP may be sent at now; Sent records one
// that was. OnCE is the two at once, for a caller whose CNPs always go.
func (n *NP) Allows(now Time) bool { return !n.sent || now-n.last >= n.gap }

// Sent records a CNP sent at now.
func (n *NP) Sent(now Time) { n.sent, n.last = true, now }

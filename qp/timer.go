package qp

// timer is one of a QP's timers: armed or not, and when it is due. The
// QP's Deadline is the earliest of them.
type timer struct {
	armed bool
	due   Time
}

func (t *timer) arm(at Time) { t.armed, t.due = true, at }
func (t *timer) stop()       { t.armed = false }

// expired reports whether t is armed and due at now.
func (t *timer) expired(now Time) bool { return t.armed && now >= t.due }

// earlier returns the earlier of t's deadline and d (valid when ok).
func (t timer) earlier(d Time, ok bool) (Time, bool) {
	if t.armed && (!ok || t.due < d) {
		return t.due, true
	}
	return d, ok
}

// earliest returns the earliest deadline of the armed timers ts.
func earliest(ts ...timer) (Time, bool) {
	var d Time
	ok := false
	for _, t := range ts {
		d, ok = t.earlier(d, ok)
	}
	return d, ok
}

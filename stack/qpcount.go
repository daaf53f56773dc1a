package stack

// NumQPs returns the number of QPs the device holds, QP1 included
// (for leak checks: every created QP counts until Destroy).
func (d *Device) NumQPs() int {
	d.qps.mu.Lock()
	n := d.qps.live
	d.qps.mu.Unlock()
	if d.qps.gsi.Load() != nil {
		n++
	}
	return n
}

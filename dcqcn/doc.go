// Package dcqcn implements DCQCN congestion control for RoCEv2 (Zhu et
// al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM
// 2015, with QCN's increase stages) with the parameters and defaults of
// NVIDIA ConnectX firmware. It is sans-I/O: the types take events and the
// time in, and report rates and decisions out. They start no goroutines,
// never read the clock and do not allocate after Init.
//
// # Roles
//
// A switch marks ECN-capable packets CE when a queue builds up. The
// notification point ([NP], the receiving QP) answers a CE-marked packet
// with a CNP (BTH opcode 0x81, BECN set, addressed to the sending QP), at
// most one per QP every min_time_between_cnps. The reaction point ([RP],
// the sending QP) cuts its rate on CNPs and recovers by timer and byte
// counter; while it is limited a [Pacer] spaces the QP's packets at the
// RP's rate.
//
// # Reaction point
//
// An RP has a current rate Rc, a target rate Rt, the congestion estimate
// α, and the counters T (timer events) and BC (byte-counter events) since
// the last cut. It starts at the line rate L, not limited. With g =
// (1024 − dce_tcp_g)/1024 and Gd = 2^rpg_gd/1024 (2 by default):
//
// First CNP (not limited): the rate limiter is allocated, α ←
// initial_alpha_value/1024, Rt ← min(L, rpg_max_rate), and Rc is cut from
// L as below (or Rc = Rt = rate_to_set_on_first_cnp when that is set).
//
// Cut, at most once per rate_reduce_monitor_period:
//
//	Rt ← Rc                         (see "target clamping")
//	Rc ← max(Rc·(1 − α/Gd), Rc·rpg_min_dec_fac/100, rpg_min_rate)
//	T, BC, byte count ← 0; the increase timer restarts
//
// A CNP within the monitor period of the last cut does not cut; OnCNP
// returns false for it.
//
// Alpha: every CNP sets α ← (1 − g)·α + g and restarts the alpha period;
// each dce_tcp_rtt without a CNP, α ← (1 − g)·α. After k quiet periods α
// is (1 − g)^k times its value at the last CNP.
//
// Increase events: the timer fires every rpg_time_reset after a cut (T
// counts them), the byte counter every rpg_byte_reset bytes sent (BC
// counts them). With F = rpg_threshold and T, BC counted before the event:
//
//	max(T, BC) < F:  fast recovery      Rc ← (Rt + Rc)/2
//	min(T, BC) > F:  hyper increase     Rt ← Rt + i·rpg_hai_rate, i = min(T, BC) − F;
//	                                    Rc ← (Rt + Rc)/2
//	otherwise:       additive increase  Rt ← Rt + rpg_ai_rate; Rc ← (Rt + Rc)/2
//
// Rt never exceeds rpg_max_rate (the line rate when 0). Once Rc reaches
// it, the limiter is released: the QP sends at line rate, unpaced, and
// the next CNP starts a new episode. Without a byte counter
// (rpg_byte_reset 0) the timer stage stands for both counters.
//
// Target clamping: ClampTgtRate makes every cut set Rt ← Rc. Otherwise a
// cut sets Rt ← Rc only if the rate increased since the last cut: always
// when the last increase came from the byte counter, and when it came
// from the timer only with clamp_tgt_rate_after_time_inc (the default).
// Consecutive cuts with no increase between them keep the older, higher
// target, so recovery aims at the rate before congestion.
//
// # Parameters and defaults
//
// [Params] holds the firmware's parameters under their mlx5 names and in
// their units; [Defaults] returns ConnectX's defaults:
//
//	clamp_tgt_rate                  0       target clamped on every cut
//	clamp_tgt_rate_after_time_inc   1       ... also after a timer increase
//	rpg_time_reset                  300     µs, increase timer
//	rpg_byte_reset                  32767   bytes, byte counter
//	rpg_threshold                   1       F, fast recovery events
//	rpg_max_rate                    0       Mbit/s, 0 = line rate
//	rpg_ai_rate                     5       Mbit/s, additive increase
//	rpg_hai_rate                    50      Mbit/s, hyper increase
//	rpg_gd                          11      cut by α/2
//	rpg_min_dec_fac                 50      %, one cut keeps at least half
//	rpg_min_rate                    1       Mbit/s, rate floor
//	rate_to_set_on_first_cnp        0       Mbit/s, 0 = cut from line rate
//	dce_tcp_g                       1019    α kept per update: g = 5/1024
//	dce_tcp_rtt                     1       µs, alpha period
//	rate_reduce_monitor_period      4       µs, minimum time between cuts
//	initial_alpha_value             1023    α = 1023/1024 on the first CNP
//	min_time_between_cnps           2       µs, per QP
//	cnp_dscp                        48      DSCP of CNPs
//	cnp_802p_prio                   6       PCP of CNPs
//
// [Params.Set], [Params.Get], [Names] and [Usage] address each parameter
// by that name, so a command line can offer every one as a flag:
//
//	p := dcqcn.Defaults()
//	for _, name := range dcqcn.Names() {
//		flag.Func("dcqcn."+name, dcqcn.Usage(name), func(v string) error { return p.Set(name, v) })
//	}
//
// # Arithmetic
//
// Rates are integers in bit/s. α is fixed point with 32 fractional bits,
// which holds the firmware's 1/1024 steps exactly. Rounding:
//
//   - a cut rounds the decrease down (the new rate up by < 1 bit/s);
//   - (Rt + Rc)/2 rounds up, so Rc reaches Rt exactly;
//   - an α update rounds down by < 2^-32; α's decay over k periods is
//     computed from the last CNP by repeated squaring with 63 fractional
//     bits and rounds down to within 2^-32 of (1 − g)^k·α.
//
// Alpha's decay needs no timer: it is computed from the time of the last
// CNP when a cut needs it. RP.Deadline therefore reports only the increase
// timer (every rpg_time_reset while limited), not the 1 µs alpha period.
// Events fall on fixed grids (the timer restarts only at cuts) and runs
// of identical increase events are summed in closed form, so calling
// Advance once after a long gap gives exactly the state that calling it
// every microsecond would, at a cost bounded by the rates, not the gap.
//
// The Pacer keeps transmission times in ns with 24 fractional bits, one
// byte's time rounded up, so it never exceeds its rate and does not drift
// below it; Allow and Next multiply, only SetRate divides.
//
// # Interpretation
//
// Where the firmware's documentation leaves room, this package chooses:
//
//   - rate_reduce_monitor_period: a CNP cuts at once if the last cut is at
//     least a period old; a CNP within the period does not cut, and is not
//     remembered for a later cut. (The firmware's text describes the cut
//     at the start of the next period.)
//   - alpha: raised by each CNP, cut or not, and decayed per period from
//     the last CNP, as in the paper. (The firmware updates α at fixed
//     period ticks, raising it when the period saw a CNP.)
//   - rpg_min_dec_fac bounds the rate after a cut from below
//     (new ≥ fac%·old), as NVIDIA documents it; 100 disables cuts.
//   - rate_to_set_on_first_cnp replaces the first cut: Rc = Rt = that
//     rate.
//
// # Use in an engine
//
// Per QP the engine keeps an RP and a Pacer (sender) and an NP (receiver);
// the counters named are mlx5's:
//
//	// a CNP for the QP arrived
//	if q.rp.OnCNP(now) { rp_cnp_handled++ } else { rp_cnp_ignored++ }
//
//	// before sending a packet of n bytes
//	q.rp.Advance(now)
//	if q.rp.Limited() {
//		q.pacer.SetRate(q.rp.Rate())
//		if !q.pacer.Allow(now, n) {
//			// wake at q.pacer.Next(now, n); stop sending on this QP
//		}
//	}
//	// send, then
//	q.rp.OnSent(now, n)
//
//	// a CE-marked packet arrived for a QP
//	np_ecn_marked_roce_packets++
//	if q.np.OnCE(now) {
//		// send a CNP with cnp_dscp and cnp_802p_prio
//		np_cnp_sent++
//	}
//
//	// sleeping: wake by the earliest of RP.Deadline and the Pacer's Next
//	// for a QP with work waiting
//
// # Goroutines
//
// Nothing here is safe for concurrent use. An RP, Pacer and NP belong to
// their QP and are used only by the engine goroutine that owns the QP;
// other goroutines reach them through that goroutine. Params are values:
// build them before the engine starts and pass them to Init.
package dcqcn

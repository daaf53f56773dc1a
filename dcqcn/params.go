package dcqcn

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Params are DCQCN's parameters in the units and encodings of the mlx5
// firmware (the fields of cong_control_r_roce_ecn_rp and _np in
// mlx5_ifc.h). Each field names its firmware parameter, which is also the
// file name under MLNX_OFED's /sys/class/net/<if>/ecn/roce_rp/ (or
// roce_np/) and, upper-cased with a _P1 suffix, the mlxconfig name, so a
// configuration copied from a ConnectX port means the same here.
//
// Params are plain values: an RP or NP copies what it needs at Init, so
// changing Params afterwards affects only QPs initialised later.
type Params struct {
	// Reaction point (sender).

	// clamp_tgt_rate: on every rate cut the target rate becomes the
	// current rate. When false, the target is kept across cuts with no
	// rate increase in between (see ClampTgtRateAfterTimeInc).
	ClampTgtRate bool
	// clamp_tgt_rate_after_time_inc: with ClampTgtRate false, a cut also
	// clamps the target when the last increase since the previous cut came
	// from the timer, not only when it came from the byte counter.
	ClampTgtRateAfterTimeInc bool
	// rpg_time_reset: period of the rate increase timer, µs.
	TimeReset uint32
	// rpg_byte_reset: bytes sent per byte-counter increase event; 0
	// disables the byte counter (the stage is then decided by the timer
	// alone).
	ByteReset uint32
	// rpg_threshold: F, the number of timer or byte-counter events spent
	// in fast recovery before additive increase (1..31).
	Threshold uint32
	// rpg_max_rate: Mbit/s at which the rate limiter is released; 0 means
	// the line rate.
	MaxRate uint32
	// rpg_ai_rate: additive increase of the target rate, Mbit/s.
	AIRate uint32
	// rpg_hai_rate: hyper increase step of the target rate, Mbit/s.
	HAIRate uint32
	// rpg_gd: log2 of the divisor of alpha (in its 1/1024 encoding) in
	// the cut: Rc ← Rc·(1 − α·1024/2^rpg_gd). 11 gives the paper's α/2,
	// 10 gives α.
	GD uint32
	// rpg_min_dec_fac: one cut keeps at least this percentage of the
	// current rate (0 unbounded, 100 no cut).
	MinDecFac uint32
	// rpg_min_rate: floor of the current rate, Mbit/s.
	MinRate uint32
	// rate_to_set_on_first_cnp: current and target rate set by the first
	// CNP of a congestion episode, Mbit/s; 0 means a normal cut from the
	// line rate.
	RateOnFirstCNP uint32
	// dce_tcp_g: the part of alpha kept per update, in 1/1024: α ←
	// (G/1024)·α + (1024−G)/1024 with a CNP, α ← (G/1024)·α without. The
	// paper's gain is g = (1024−G)/1024.
	AlphaG uint32
	// dce_tcp_rtt: alpha update period, µs.
	AlphaPeriod uint32
	// rate_reduce_monitor_period: minimum time between two cuts, µs.
	RateReducePeriod uint32
	// initial_alpha_value: alpha set by the first CNP of a congestion
	// episode, in 1/1024.
	InitialAlpha uint32

	// Notification point (receiver).

	// min_time_between_cnps: minimum time between two CNPs sent for one
	// QP, µs; 0 answers every CE-marked packet.
	MinTimeBetweenCNPs uint32
	// cnp_dscp: DSCP of the CNPs sent.
	CNPDSCP uint8
	// cnp_802p_prio: VLAN PCP of the CNPs sent.
	CNPPrio uint8
}

// Defaults returns the ConnectX firmware defaults (ConnectX-4 and later, as
// mlxconfig reports them).
func Defaults() Params {
	return Params{
		ClampTgtRate:             false,
		ClampTgtRateAfterTimeInc: true,
		TimeReset:                300,
		ByteReset:                32767,
		Threshold:                1,
		MaxRate:                  0,
		AIRate:                   5,
		HAIRate:                  50,
		GD:                       11,
		MinDecFac:                50,
		MinRate:                  1,
		RateOnFirstCNP:           0,
		AlphaG:                   1019,
		AlphaPeriod:              1,
		RateReducePeriod:         4,
		InitialAlpha:             1023,
		MinTimeBetweenCNPs:       2,
		CNPDSCP:                  48,
		CNPPrio:                  6,
	}
}

var (
	// ErrUnknownParam reports a parameter name that is not one of Names.
	ErrUnknownParam = errors.New("unknown dcqcn parameter")
	// ErrRange reports a parameter value outside its allowed range, or
	// parameters that contradict each other.
	ErrRange = errors.New("value out of range")
)

// param describes one parameter: its firmware name, range and field.
type param struct {
	name   string
	unit   string
	help   string
	lo, hi uint64
	flag   bool // a boolean: 0 or 1
	get    func(*Params) uint64
	set    func(*Params, uint64)
}

func u32(name, unit string, lo, hi uint64, f func(*Params) *uint32, help string) param {
	return param{name: name, unit: unit, help: help, lo: lo, hi: hi,
		get: func(p *Params) uint64 { return uint64(*f(p)) },
		set: func(p *Params, v uint64) { *f(p) = uint32(v) }}
}

func u8(name string, hi uint64, f func(*Params) *uint8, help string) param {
	return param{name: name, help: help, hi: hi,
		get: func(p *Params) uint64 { return uint64(*f(p)) },
		set: func(p *Params, v uint64) { *f(p) = uint8(v) }}
}

func onOff(name string, f func(*Params) *bool, help string) param {
	return param{name: name, help: help, hi: 1, flag: true,
		get: func(p *Params) uint64 {
			if *f(p) {
				return 1
			}
			return 0
		},
		set: func(p *Params, v uint64) { *f(p) = v != 0 }}
}

const u32max = math.MaxUint32

// params lists every parameter, in the firmware's field order. Ranges are
// the firmware's documented ones where it documents them.
var params = [...]param{
	onOff("clamp_tgt_rate", func(p *Params) *bool { return &p.ClampTgtRate },
		"every cut sets the target rate to the current rate"),
	onOff("clamp_tgt_rate_after_time_inc", func(p *Params) *bool { return &p.ClampTgtRateAfterTimeInc },
		"a cut after a timer increase also sets the target rate to the current rate"),
	u32("rpg_time_reset", "µs", 1, u32max, func(p *Params) *uint32 { return &p.TimeReset },
		"rate increase timer period"),
	u32("rpg_byte_reset", "bytes", 0, u32max, func(p *Params) *uint32 { return &p.ByteReset },
		"bytes sent per byte-counter increase event, 0 disables the byte counter"),
	u32("rpg_threshold", "events", 1, 31, func(p *Params) *uint32 { return &p.Threshold },
		"fast recovery events (F) before additive increase"),
	u32("rpg_max_rate", "Mbit/s", 0, u32max, func(p *Params) *uint32 { return &p.MaxRate },
		"rate at which the limiter is released, 0 for the line rate"),
	u32("rpg_ai_rate", "Mbit/s", 1, u32max, func(p *Params) *uint32 { return &p.AIRate },
		"additive increase of the target rate"),
	u32("rpg_hai_rate", "Mbit/s", 0, u32max, func(p *Params) *uint32 { return &p.HAIRate },
		"hyper increase step of the target rate"),
	u32("rpg_gd", "log2", 10, 15, func(p *Params) *uint32 { return &p.GD },
		"cut Rc·(1 − α·1024/2^rpg_gd): 11 is α/2"),
	u32("rpg_min_dec_fac", "%", 0, 100, func(p *Params) *uint32 { return &p.MinDecFac },
		"a cut keeps at least this share of the current rate"),
	u32("rpg_min_rate", "Mbit/s", 1, u32max, func(p *Params) *uint32 { return &p.MinRate },
		"floor of the current rate"),
	u32("rate_to_set_on_first_cnp", "Mbit/s", 0, u32max, func(p *Params) *uint32 { return &p.RateOnFirstCNP },
		"rate set by the first CNP, 0 for a normal cut from the line rate"),
	u32("dce_tcp_g", "1/1024", 0, 1023, func(p *Params) *uint32 { return &p.AlphaG },
		"share of alpha kept per update; gain g = (1024 − dce_tcp_g)/1024"),
	u32("dce_tcp_rtt", "µs", 1, 131071, func(p *Params) *uint32 { return &p.AlphaPeriod },
		"alpha update period"),
	u32("rate_reduce_monitor_period", "µs", 1, u32max, func(p *Params) *uint32 { return &p.RateReducePeriod },
		"minimum time between two cuts"),
	u32("initial_alpha_value", "1/1024", 1, 1023, func(p *Params) *uint32 { return &p.InitialAlpha },
		"alpha set by the first CNP"),
	u32("min_time_between_cnps", "µs", 0, u32max, func(p *Params) *uint32 { return &p.MinTimeBetweenCNPs },
		"minimum time between two CNPs for one QP, 0 for none"),
	u8("cnp_dscp", 63, func(p *Params) *uint8 { return &p.CNPDSCP },
		"DSCP of the CNPs sent"),
	u8("cnp_802p_prio", 7, func(p *Params) *uint8 { return &p.CNPPrio },
		"VLAN priority (PCP) of the CNPs sent"),
}

func lookup(name string) (*param, error) {
	for i := range params {
		if params[i].name == name {
			return &params[i], nil
		}
	}
	return nil, fmt.Errorf("%q: %w", name, ErrUnknownParam)
}

// Names returns the firmware names of all parameters, reaction point
// first, in the firmware's field order.
func Names() []string {
	n := make([]string, len(params))
	for i := range params {
		n[i] = params[i].name
	}
	return n
}

// Usage returns a one-line description of the named parameter with its
// unit, range and default, for a flag's help text; "" for an unknown name.
func Usage(name string) string {
	pr, err := lookup(name)
	if err != nil {
		return ""
	}
	d := Defaults()
	if pr.flag {
		return fmt.Sprintf("%s (0 or 1, default %d)", pr.help, pr.get(&d))
	}
	unit := ""
	if pr.unit != "" {
		unit = pr.unit + ", "
	}
	return fmt.Sprintf("%s (%s%d..%d, default %d)", pr.help, unit, pr.lo, pr.hi, pr.get(&d))
}

// Set parses value as the named parameter and stores it: a decimal
// unsigned integer, or for the two booleans 0, 1, true or false.
func (p *Params) Set(name, value string) error {
	pr, err := lookup(name)
	if err != nil {
		return err
	}
	var v uint64
	if pr.flag {
		b, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if b {
			v = 1
		}
	} else {
		v, err = strconv.ParseUint(value, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := pr.check(v); err != nil {
		return err
	}
	pr.set(p, v)
	return nil
}

// Get returns the named parameter in the form Set accepts (booleans as 0
// or 1, like the sysfs files).
func (p *Params) Get(name string) (string, error) {
	pr, err := lookup(name)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(pr.get(p), 10), nil
}

func (pr *param) check(v uint64) error {
	if v < pr.lo || v > pr.hi {
		return fmt.Errorf("%s: %d not in %d..%d: %w", pr.name, v, pr.lo, pr.hi, ErrRange)
	}
	return nil
}

// Validate reports every parameter outside its range and every
// contradiction between parameters, joined; nil if the set is usable.
func (p *Params) Validate() error {
	var errs []error
	for i := range params {
		if err := params[i].check(params[i].get(p)); err != nil {
			errs = append(errs, err)
		}
	}
	if p.MaxRate != 0 && p.MinRate > p.MaxRate {
		errs = append(errs, fmt.Errorf("rpg_min_rate %d above rpg_max_rate %d: %w", p.MinRate, p.MaxRate, ErrRange))
	}
	if p.RateOnFirstCNP != 0 && p.RateOnFirstCNP < p.MinRate {
		errs = append(errs, fmt.Errorf("rate_to_set_on_first_cnp %d below rpg_min_rate %d: %w", p.RateOnFirstCNP, p.MinRate, ErrRange))
	}
	return errors.Join(errs...)
}

// ValidateFor is Validate plus the checks that need the link: lineRate
// (bit/s) must be positive and at least rpg_min_rate and
// rate_to_set_on_first_cnp. RP.Init clamps instead of failing, so callers
// check a configuration once with ValidateFor.
func (p *Params) ValidateFor(lineRate uint64) error {
	errs := []error{p.Validate()}
	if lineRate == 0 {
		errs = append(errs, fmt.Errorf("line rate 0: %w", ErrRange))
	}
	if mbps(p.MinRate) > lineRate {
		errs = append(errs, fmt.Errorf("rpg_min_rate %d Mbit/s above the line rate %d bit/s: %w", p.MinRate, lineRate, ErrRange))
	}
	if mbps(p.RateOnFirstCNP) > lineRate {
		errs = append(errs, fmt.Errorf("rate_to_set_on_first_cnp %d Mbit/s above the line rate %d bit/s: %w", p.RateOnFirstCNP, lineRate, ErrRange))
	}
	return errors.Join(errs...)
}

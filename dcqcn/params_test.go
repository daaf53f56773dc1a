package dcqcn

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The ConnectX defaults, by firmware name.
var wantDefaults = map[string]string{
	"clamp_tgt_rate":                "0",
	"clamp_tgt_rate_after_time_inc": "1",
	"rpg_time_reset":                "300",
	"rpg_byte_reset":                "32767",
	"rpg_threshold":                 "1",
	"rpg_max_rate":                  "0",
	"rpg_ai_rate":                   "5",
	"rpg_hai_rate":                  "50",
	"rpg_gd":                        "11",
	"rpg_min_dec_fac":               "50",
	"rpg_min_rate":                  "1",
	"rate_to_set_on_first_cnp":      "0",
	"dce_tcp_g":                     "1019",
	"dce_tcp_rtt":                   "1",
	"rate_reduce_monitor_period":    "4",
	"initial_alpha_value":           "1023",
	"min_time_between_cnps":         "2",
	"cnp_dscp":                      "48",
	"cnp_802p_prio":                 "6",
}

func TestDefaults(t *testing.T) {
	d := Defaults()
	names := Names()
	if len(names) != len(wantDefaults) {
		t.Errorf("%d names, want %d", len(names), len(wantDefaults))
	}
	for _, name := range names {
		got, err := d.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := wantDefaults[name]; !ok || got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
		if u := Usage(name); u == "" || !strings.Contains(u, "default "+got) {
			t.Errorf("Usage(%s) = %q", name, u)
		}
	}
	if err := d.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := d.ValidateFor(1_000_000_000); err != nil {
		t.Errorf("defaults on 1 Gbit/s: %v", err)
	}
	if Usage("nope") != "" {
		t.Error("Usage of an unknown name")
	}
}

func TestNamesUnique(t *testing.T) {
	n := Names()
	s := slices.Clone(n)
	slices.Sort(s)
	if len(slices.Compact(s)) != len(n) {
		t.Errorf("duplicate names: %v", n)
	}
	n[0] = "changed"
	if Names()[0] == "changed" {
		t.Error("Names shares its slice")
	}
}

// Every parameter survives Get → Set, and Set → Get.
func TestSetGetRoundTrip(t *testing.T) {
	d := Defaults()
	var p Params
	for _, name := range Names() {
		v, _ := d.Get(name)
		if err := p.Set(name, v); err != nil {
			t.Fatalf("Set(%s, %s): %v", name, v, err)
		}
	}
	if p != d {
		t.Errorf("round trip:\n%+v\n%+v", p, d)
	}
	for _, tc := range []struct{ name, in, out string }{
		{"clamp_tgt_rate", "true", "1"},
		{"clamp_tgt_rate", "0", "0"},
		{"clamp_tgt_rate_after_time_inc", "false", "0"},
		{"rpg_time_reset", "55", "55"},
		{"rpg_byte_reset", "0", "0"},
		{"rpg_byte_reset", "10485760", "10485760"},
		{"rpg_threshold", "31", "31"},
		{"rpg_gd", "10", "10"},
		{"dce_tcp_g", "0", "0"},
		{"rate_reduce_monitor_period", "4294967295", "4294967295"},
		{"cnp_dscp", "63", "63"},
		{"cnp_802p_prio", "7", "7"},
	} {
		if err := p.Set(tc.name, tc.in); err != nil {
			t.Errorf("Set(%s, %s): %v", tc.name, tc.in, err)
			continue
		}
		if got, _ := p.Get(tc.name); got != tc.out {
			t.Errorf("Set(%s, %s) then Get = %s, want %s", tc.name, tc.in, got, tc.out)
		}
	}
}

func TestSetErrors(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		is          error // nil: a parse error
	}{
		{"rpg_foo", "1", ErrUnknownParam},
		{"RPG_TIME_RESET", "1", ErrUnknownParam},
		{"rpg_time_reset", "0", ErrRange},
		{"rpg_time_reset", "4294967296", ErrRange},
		{"rpg_threshold", "0", ErrRange},
		{"rpg_threshold", "32", ErrRange},
		{"rpg_gd", "9", ErrRange},
		{"rpg_min_dec_fac", "101", ErrRange},
		{"rpg_min_rate", "0", ErrRange},
		{"rpg_ai_rate", "0", ErrRange},
		{"dce_tcp_g", "1024", ErrRange},
		{"dce_tcp_rtt", "0", ErrRange},
		{"dce_tcp_rtt", "131072", ErrRange},
		{"initial_alpha_value", "0", ErrRange},
		{"cnp_dscp", "64", ErrRange},
		{"cnp_802p_prio", "8", ErrRange},
		{"rpg_time_reset", "", nil},
		{"rpg_time_reset", "abc", nil},
		{"rpg_time_reset", "-1", nil},
		{"rpg_time_reset", "1.5", nil},
		{"rpg_time_reset", "0x10", nil},
		{"clamp_tgt_rate", "2", nil},
		{"clamp_tgt_rate", "yes", nil},
	} {
		p := Defaults()
		err := p.Set(tc.name, tc.value)
		if err == nil {
			t.Errorf("Set(%s, %q) accepted", tc.name, tc.value)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("Set(%s, %q): %v, want %v", tc.name, tc.value, err, tc.is)
		}
		if tc.is != ErrUnknownParam && !strings.HasPrefix(err.Error(), tc.name+": ") {
			t.Errorf("Set(%s, %q): %q does not name the parameter", tc.name, tc.value, err)
		}
		if p != Defaults() {
			t.Errorf("Set(%s, %q) failed but changed the parameters", tc.name, tc.value)
		}
	}
	var p Params
	if _, err := p.Get("nope"); !errors.Is(err, ErrUnknownParam) {
		t.Errorf("Get(nope): %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Params)
		want string // in the error
	}{
		{"zero value", func(p *Params) { *p = Params{} }, "rpg_time_reset"},
		{"zero timer", func(p *Params) { p.TimeReset = 0 }, "rpg_time_reset"},
		{"zero alpha period", func(p *Params) { p.AlphaPeriod = 0 }, "dce_tcp_rtt"},
		{"zero monitor period", func(p *Params) { p.RateReducePeriod = 0 }, "rate_reduce_monitor_period"},
		{"threshold", func(p *Params) { p.Threshold = 40 }, "rpg_threshold"},
		{"gd", func(p *Params) { p.GD = 3 }, "rpg_gd"},
		{"min dec fac", func(p *Params) { p.MinDecFac = 200 }, "rpg_min_dec_fac"},
		{"g", func(p *Params) { p.AlphaG = 2000 }, "dce_tcp_g"},
		{"alpha", func(p *Params) { p.InitialAlpha = 1024 }, "initial_alpha_value"},
		{"dscp", func(p *Params) { p.CNPDSCP = 64 }, "cnp_dscp"},
		{"pcp", func(p *Params) { p.CNPPrio = 9 }, "cnp_802p_prio"},
		{"min above max", func(p *Params) { p.MinRate, p.MaxRate = 2000, 1000 }, "rpg_min_rate 2000 above rpg_max_rate"},
		{"first below min", func(p *Params) { p.MinRate, p.RateOnFirstCNP = 2000, 1000 }, "rate_to_set_on_first_cnp 1000 below"},
	} {
		p := Defaults()
		tc.mod(&p)
		err := p.Validate()
		if err == nil || !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	// Every problem is reported, not only the first.
	p := Params{}
	if err := p.Validate(); strings.Count(err.Error(), "\n") < 5 {
		t.Errorf("zero value: only %q", err)
	}
}

func TestValidateFor(t *testing.T) {
	p := Defaults()
	if err := p.ValidateFor(0); err == nil || !errors.Is(err, ErrRange) {
		t.Errorf("line rate 0: %v", err)
	}
	p.MinRate = 20_000
	if err := p.ValidateFor(10_000_000_000); err == nil || !strings.Contains(err.Error(), "rpg_min_rate 20000 Mbit/s above the line rate") {
		t.Errorf("min rate above line rate: %v", err)
	}
	p = Defaults()
	p.RateOnFirstCNP = 200_000
	if err := p.ValidateFor(g100); err == nil || !strings.Contains(err.Error(), "rate_to_set_on_first_cnp") {
		t.Errorf("first rate above line rate: %v", err)
	}
	p.Threshold = 0
	if err := p.ValidateFor(g100); err == nil || !strings.Contains(err.Error(), "rpg_threshold") {
		t.Errorf("ValidateFor skips Validate: %v", err)
	}
}

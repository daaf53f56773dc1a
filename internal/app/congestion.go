package app

import (
	"flag"
	"strings"

	"github.com/uroce/uroce/dcqcn"
	"github.com/uroce/uroce/stack"
)

// CongestionFlags are the flags of a device's congestion control: its
// marking (stack.Config.Marking: --dscp, --ecn, --no-cnp; --vlan), --no-dcqcn,
// and every DCQCN parameter under its mlx5 name with dashes
// (--rpg-time-reset, --min-time-between-cnps, --cnp-dscp, ...). The
// daemon and the tools that open a device share them. The zero value,
// unregistered, gives the stack's defaults.
type CongestionFlags struct {
	DSCP    int
	VLAN    int
	ECN     string
	NoCNP   bool
	NoDCQCN bool
	DCQCN   dcqcn.Params

	registered, changed bool
}

// Register adds the flags to fs.
func (c *CongestionFlags) Register(fs *flag.FlagSet) {
	c.registered = true
	c.DCQCN = dcqcn.Defaults()
	fs.IntVar(&c.DSCP, "dscp", stack.DefaultDSCP, "DSCP of RoCE packets whose address handle or QP names none (-1: 0)")
	fs.IntVar(&c.VLAN, "vlan", 0, "tag every frame with this 802.1Q VLAN ID (priority from the DSCP, the SL, or cnp_802p_prio for CNPs)")
	fs.StringVar(&c.ECN, "ecn", "ect0", "ECN bits of RoCE packets: ect0, ect1, or off (as the traffic class gives them)")
	fs.BoolVar(&c.NoCNP, "no-cnp", false, "send no CNPs for CE-marked packets (they are still counted)")
	fs.BoolVar(&c.NoDCQCN, "no-dcqcn", false, "QPs ignore CNPs (no DCQCN rate control)")
	RegisterDCQCN(fs, &c.DCQCN, func() { c.changed = true })
}

// RegisterDCQCN adds a flag for every DCQCN parameter to fs (its mlx5
// name with dashes, FlagName), setting it in p; set, when not nil, is
// called for each flag given.
func RegisterDCQCN(fs *flag.FlagSet, p *dcqcn.Params, set func()) {
	for _, name := range dcqcn.Names() {
		fs.Func(FlagName(name), "DCQCN: "+dcqcn.Usage(name), func(v string) error {
			if set != nil {
				set()
			}
			return p.Set(name, v)
		})
	}
}

// FlagName is the flag of a DCQCN parameter: its mlx5 name with dashes.
func FlagName(param string) string { return strings.ReplaceAll(param, "_", "-") }

// Apply sets cfg's marking and DCQCN parameters from the flags.
func (c *CongestionFlags) Apply(cfg *stack.Config) error {
	if !c.registered {
		return nil
	}
	e, err := stack.ParseECN(c.ECN)
	if err != nil {
		return err
	}
	dscp := c.DSCP
	if dscp == 0 {
		dscp = -1 // stack.Marking's 0 is the default
	}
	cfg.Marking = stack.Marking{DSCP: dscp, ECN: e, NoCNP: c.NoCNP}
	cfg.VLAN = c.VLAN
	p := c.DCQCN
	cfg.DCQCN, cfg.NoDCQCN = &p, c.NoDCQCN
	return nil
}

// Changed reports whether any flag asks for other than the defaults.
func (c *CongestionFlags) Changed() bool {
	return c.registered && (c.changed || c.NoCNP || c.NoDCQCN || c.VLAN != 0 || c.DSCP != stack.DefaultDSCP || c.ECN != "ect0")
}

// congestionHelp are the help lines of CongestionFlags: the DCQCN
// parameters three to a line.
var congestionHelp = func() [][2]string {
	h := [][2]string{
		{"--dscp=N, --ecn=ect0|ect1|off", "DSCP (default 26) and ECN bits (default ECT(0)) of RoCE packets"},
		{"--vlan=VID", "tag every frame with this 802.1Q VLAN (priority: the DSCP's, DSCP/8)"},
		{"--no-cnp, --no-dcqcn", "send no CNPs for CE-marked packets; ignore the CNPs received"},
	}
	names := dcqcn.Names()
	for i := 0; i < len(names); i += 3 {
		var fl []string
		for _, n := range names[i:min(i+3, len(names))] {
			fl = append(fl, "--"+FlagName(n)+"=N")
		}
		desc := ""
		if i == 0 {
			desc = "DCQCN's parameters, by their mlx5 names (ConnectX's defaults)"
		}
		h = append(h, [2]string{strings.Join(fl, ", "), desc})
	}
	return h
}()

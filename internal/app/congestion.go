package app

import (
	"flag"

	"github.com/uroce/uroce/stack"
)

// CongestionFlags are the flags of a device's marking for the network's
// congestion control (stack.Config.Marking): --dscp, --ecn, --cnp-dscp
// and --no-cnp. The daemon and the tools that open a device share them.
// The zero value, unregistered, gives the stack's defaults.
type CongestionFlags struct {
	DSCP    int
	ECN     string
	CNPDSCP int
	NoCNP   bool

	registered bool
}

// Register adds the flags to fs.
func (c *CongestionFlags) Register(fs *flag.FlagSet) {
	c.registered = true
	fs.IntVar(&c.DSCP, "dscp", stack.DefaultDSCP, "DSCP of RoCE packets whose address handle or QP names none (-1: 0)")
	fs.StringVar(&c.ECN, "ecn", "ect0", "ECN bits of RoCE packets: ect0, ect1, or off (as the traffic class gives them)")
	fs.IntVar(&c.CNPDSCP, "cnp-dscp", stack.DefaultCNPDSCP, "DSCP of the congestion notifications (CNPs) sent for CE-marked packets (-1: 0)")
	fs.BoolVar(&c.NoCNP, "no-cnp", false, "send no CNPs for CE-marked packets (they are still counted)")
}

// Marking returns the marking the flags ask for.
func (c *CongestionFlags) Marking() (stack.Marking, error) {
	if !c.registered {
		return stack.Marking{}, nil
	}
	e, err := stack.ParseECN(c.ECN)
	if err != nil {
		return stack.Marking{}, err
	}
	return stack.Marking{DSCP: zeroAs(c.DSCP), ECN: e, CNPDSCP: zeroAs(c.CNPDSCP), NoCNP: c.NoCNP}, nil
}

// Changed reports whether any flag asks for other than the defaults.
func (c *CongestionFlags) Changed() bool {
	m, err := c.Marking()
	return err != nil || m != (stack.Marking{DSCP: stack.DefaultDSCP, CNPDSCP: stack.DefaultCNPDSCP}) && m != (stack.Marking{})
}

// zeroAs maps a flag's DSCP to stack.Marking's: 0 there means the
// default, so an explicit 0 is -1.
func zeroAs(dscp int) int {
	if dscp == 0 {
		return -1
	}
	return dscp
}

// congestionHelp are the help lines of CongestionFlags.
var congestionHelp = [][2]string{
	{"--dscp=N, --ecn=ect0|ect1|off", "DSCP (default 26) and ECN bits (default ECT(0)) of RoCE packets"},
	{"--cnp-dscp=N, --no-cnp", "DSCP of the CNPs sent for CE-marked packets (default 48), or none"},
}

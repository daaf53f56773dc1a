package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// Tool names one of perftest's RDMA tools.
type Tool int

// The tools whose out-of-band protocol is implemented.
const (
	WriteBW Tool = iota
	ReadBW
	SendBW
	AtomicBW
	WriteLat
	ReadLat
	SendLat
	AtomicLat
)

var toolNames = [...]string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat",
	"ib_send_lat", "ib_atomic_lat"}

// String returns the tool's command name.
func (t Tool) String() string {
	if t >= 0 && int(t) < len(toolNames) {
		return toolNames[t]
	}
	return fmt.Sprintf("Tool(%d)", int(t))
}

// Valid reports whether t is one of the tools.
func (t Tool) Valid() bool { return t >= 0 && int(t) < len(toolNames) }

// Verb returns the operation the tool measures.
func (t Tool) Verb() Verb {
	switch t {
	case WriteBW, WriteLat:
		return Write
	case ReadBW, ReadLat:
		return Read
	case AtomicBW, AtomicLat:
		return Atomic
	}
	return Send
}

// BW reports whether t is a bandwidth test (else a latency test).
func (t Tool) BW() bool { return t <= AtomicBW }

// Verb is perftest's VerbType.
type Verb int

// The verbs, in perftest's order.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

// StepKind is one kind of step in a tool's out-of-band sequence.
type StepKind int

// The steps. Those marked local send nothing: they are where the caller
// does its RDMA work.
const (
	StepNegotiate StepKind = iota // versions, page and cache line sizes, MTU
	StepLocal                     // local: the caller creates its QPs and gives their keys
	StepKeys                      // one key round for QP Step.QP
	StepConnect                   // local: the caller moves its QPs to RTR/RTS
	StepSync                      // one key round with QP 0: a barrier
	StepPrepare                   // local: set-up before measured run Step.Run (post receives)
	StepRun                       // local: measured run Step.Run
	StepReports                   // bandwidth reports
	StepDone                      // "done" each way; the connection is then closed
	StepCMConnect                 // local (-R): the caller creates its QPs and connects them with rdma_cm
)

var stepNames = [...]string{"negotiate", "local", "keys", "connect", "sync", "prepare", "run", "reports", "done", "cm-connect"}

func (k StepKind) String() string {
	if k >= 0 && int(k) < len(stepNames) {
		return stepNames[k]
	}
	return fmt.Sprintf("StepKind(%d)", int(k))
}

// Step is one step of a sequence.
type Step struct {
	Kind StepKind
	QP   int // StepKeys
	Run  int // StepPrepare, StepRun
}

func (s Step) String() string {
	switch s.Kind {
	case StepKeys:
		return fmt.Sprintf("keys(%d)", s.QP)
	case StepPrepare, StepRun:
		return fmt.Sprintf("%s(%d)", s.Kind, s.Run)
	}
	return s.Kind.String()
}

// Config selects a tool's sequence.
type Config struct {
	Tool Tool
	Role Role
	// QPs is the number of queue pairs (-q); default 1.
	QPs int
	// Runs is the number of measured runs: 1, or the number of message
	// sizes with -a. Default 1.
	Runs int
	// All is -a: ib_send_bw then adds a barrier after each run.
	All bool
	// CM is -R: the exchange runs over an rdma_cm connection and the test
	// QPs are connected with rdma_cm (create_rdma_cm_connection): a
	// barrier, StepCMConnect and another barrier come between the
	// negotiation and StepLocal, both barriers with an all-zero key (the
	// keys do not exist yet); StepConnect only prints, and there is no
	// StepDone (the peers disconnect instead).
	CM bool
	// Duplex is -b (bandwidth tools): both sides run every measured run
	// and exchange their reports after it (StepReports with the run's
	// number). ib_write_bw, ib_read_bw and ib_atomic_bw start each run
	// with a barrier (with -a they also end it with one, before the
	// reports) and have no closing reports; ib_send_bw's runs are its
	// one-way ones, with the reports after each.
	Duplex bool
	// Duration is -D: ib_send_bw -b then exchanges no reports.
	Duration bool
}

func (c Config) normalized() (Config, error) {
	if !c.Tool.Valid() {
		return c, fmt.Errorf("unknown tool %d", int(c.Tool))
	}
	if c.Role != Client && c.Role != Server {
		return c, fmt.Errorf("unknown role %d", int(c.Role))
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.Runs == 0 {
		c.Runs = 1
	}
	if c.QPs < 0 || c.Runs < 0 {
		return c, errors.New("negative QP or run count")
	}
	if c.Duplex && !c.Tool.BW() {
		return c, fmt.Errorf("%s: bidirectional is only available in bw tests", c.Tool)
	}
	return c, nil
}

// Sequence returns the steps cfg's tool takes in cfg's role, as perftest
// 4.5's main functions do them (cfg.Duplex for -b, cfg.CM for -R). Both
// sides of a connection take the same byte-carrying steps in the same order;
// they differ in the local ones (in the one-way bw tools and ib_read_lat
// only the client runs).
func Sequence(cfg Config) ([]Step, error) {
	cfg, err := cfg.normalized()
	if err != nil {
		return nil, fmt.Errorf("perftest sequence: %w", err)
	}
	var s []Step
	add := func(k ...StepKind) {
		for _, kind := range k {
			s = append(s, Step{Kind: kind})
		}
	}
	keys := func() {
		for i := range cfg.QPs {
			s = append(s, Step{Kind: StepKeys, QP: i})
		}
	}
	// runs adds the measured runs: each prepared, then run between the
	// barriers asked for, with the reports (-b) after the run or after
	// its closing barrier.
	runs := func(syncBefore, syncAfter, reports, reportsLast bool) {
		for r := range cfg.Runs {
			s = append(s, Step{Kind: StepPrepare, Run: r})
			if syncBefore {
				add(StepSync)
			}
			s = append(s, Step{Kind: StepRun, Run: r})
			if reports && !reportsLast {
				s = append(s, Step{Kind: StepReports, Run: r})
			}
			if syncAfter {
				add(StepSync)
			}
			if reports && reportsLast {
				s = append(s, Step{Kind: StepReports, Run: r})
			}
		}
	}
	client := cfg.Role == Client
	add(StepNegotiate)
	if cfg.CM {
		add(StepSync, StepCMConnect, StepSync)
	}
	add(StepLocal)
	switch cfg.Tool {
	case WriteBW, ReadBW, AtomicBW:
		// Keys, connect, keys again (printed), one barrier after RTR. The
		// server then waits in a barrier for the client to finish.
		keys()
		add(StepConnect)
		keys()
		add(StepSync)
		if cfg.Duplex {
			// Both run, each run after a barrier (-a: and before
			// one, perftest 4.6 and later), the reports after it.
			runs(true, cfg.All, true, true)
			add(StepSync, StepDone)
			break
		}
		if client {
			runs(false, false, false, false)
		}
		add(StepSync, StepReports, StepSync, StepDone)
	case SendBW:
		// The barrier after RTR comes before the second key round; each run
		// starts with a barrier once receives are posted.
		keys()
		add(StepConnect, StepSync)
		keys()
		runs(true, cfg.All, cfg.Duplex && !cfg.Duration, false)
		add(StepSync, StepDone)
	case WriteLat:
		// One extra round first; no closing exchange at all.
		add(StepSync)
		keys()
		add(StepConnect)
		keys()
		add(StepSync)
		runs(false, false, false, false)
	case ReadLat, AtomicLat: // atomic_lat.c's sequence is read_lat.c's
		add(StepSync)
		keys()
		add(StepConnect)
		keys()
		add(StepSync)
		if client {
			runs(false, false, false, false)
		}
		add(StepSync, StepDone)
	case SendLat:
		keys()
		add(StepConnect, StepSync)
		keys()
		runs(true, false, false, false)
		add(StepSync, StepDone)
	}
	if cfg.CM && s[len(s)-1].Kind == StepDone {
		s = s[:len(s)-1]
	}
	return s, nil
}

// Hooks are the caller's parts of a sequence. Local and Connect are
// required; the others may be nil.
type Hooks struct {
	// Local creates the QPs once the MTU is agreed and returns their keys,
	// cfg.QPs of them. With Config.CM, CMConnect has created them.
	Local func(Agreed) ([]Dest, error)
	// CMConnect (required with Config.CM) creates the QPs and connects
	// them with rdma_cm: the client dials, the server accepts.
	CMConnect func(Agreed) error
	// Connect moves the QPs to RTR/RTS with the peer's keys.
	Connect func(remote []Dest) error
	// Prepare readies measured run r (ib_send_*: post the receives) before
	// the barrier that starts it.
	Prepare func(r int) error
	// Run performs measured run r.
	Run func(r int) error
	// Report returns this side's bandwidth report, sent in StepReports; nil
	// sends zeros (the server's report is not used by the peer).
	Report func() Report
	// Agreed, when set, sees what the negotiation agreed before Local
	// and returns the number of measured runs, 0 to keep Config.Runs
	// (over UD perftest caps the message size at the MTU, and -a's
	// sizes with it). Its error ends the sequence there, as perftest
	// exits after the MTU exchange.
	Agreed func(Agreed) (runs int, err error)
	// Reported (-b) receives the peer's report of measured run r.
	Reported func(r int, remote Report) error
}

// Result is what a sequence learnt from the peer.
type Result struct {
	Agreed Agreed
	// Remote holds the peer's keys from the first key round.
	Remote []Dest
	// RemoteReport is the peer's bandwidth report (bw tools).
	RemoteReport Report
	HasReport    bool
}

// Run carries out cfg's sequence on nc with params, calling hooks at the
// local steps. It does not close nc; after StepDone (and after the last run
// of ib_write_lat, which has no closing exchange) the caller should. A
// server blocks in a barrier while the client runs, so ctx's deadline must
// leave room for the whole test.
func Run(ctx context.Context, nc net.Conn, cfg Config, params Params, hooks Hooks) (Result, error) {
	var res Result
	steps, err := Sequence(cfg)
	if err != nil {
		return res, err
	}
	cfg, _ = cfg.normalized()
	if hooks.Local == nil || hooks.Connect == nil || cfg.CM && hooks.CMConnect == nil {
		return res, errors.New("perftest run: Local and Connect hooks (and CMConnect with CM) are required")
	}
	c := NewConn(nc, cfg.Role)
	c.CM = cfg.CM
	var local []Dest
	keyRounds := 0
	for i := 0; i < len(steps); i++ {
		st := steps[i]
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%s %s %s: %w", cfg.Tool, cfg.Role, st, err)
		}
		var err error
		switch st.Kind {
		case StepNegotiate:
			res.Agreed, err = c.Negotiate(ctx, params)
			if err == nil && hooks.Agreed != nil {
				var runs int
				if runs, err = hooks.Agreed(res.Agreed); err == nil && runs > 0 && runs != cfg.Runs {
					// The steps so far do not depend on the runs.
					cfg.Runs = runs
					steps, err = Sequence(cfg)
				}
			}
		case StepLocal:
			local, err = hooks.Local(res.Agreed)
			if err == nil && len(local) != cfg.QPs {
				err = fmt.Errorf("%d keys for %d QPs", len(local), cfg.QPs)
			}
			res.Remote = make([]Dest, cfg.QPs)
		case StepKeys:
			var d Dest
			d, err = c.HandShake(ctx, local[st.QP])
			if st.QP == 0 {
				keyRounds++
			}
			if keyRounds == 1 {
				res.Remote[st.QP] = d
			}
		case StepSync:
			var d Dest // before StepLocal (CM): zeros, as perftest's my_dest
			if len(local) > 0 {
				d = local[0]
			}
			_, err = c.HandShake(ctx, d)
		case StepCMConnect:
			err = hooks.CMConnect(res.Agreed)
		case StepConnect:
			err = hooks.Connect(res.Remote)
		case StepPrepare:
			if hooks.Prepare != nil {
				err = hooks.Prepare(st.Run)
			}
		case StepRun:
			if hooks.Run != nil {
				err = hooks.Run(st.Run)
			}
		case StepReports:
			var mine Report
			if hooks.Report != nil {
				mine = hooks.Report()
			}
			res.RemoteReport, err = c.ExchangeReports(ctx, mine)
			res.HasReport = err == nil
			if err == nil && cfg.Duplex && hooks.Reported != nil {
				err = hooks.Reported(st.Run, res.RemoteReport)
			}
		case StepDone:
			err = c.Done(ctx)
		}
		if err != nil {
			return res, fmt.Errorf("%s %s %s: %w", cfg.Tool, cfg.Role, st, err)
		}
	}
	return res, nil
}

// AllSizes returns the message sizes perftest runs with -a over RC and UC:
// 2, 4, … 2^23 bytes (23 runs). ib_atomic_bw ignores -a and runs once.
func AllSizes() []uint64 {
	s := make([]uint64, 0, 23)
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

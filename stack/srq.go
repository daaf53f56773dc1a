package stack

import (
	"fmt"
	"sync"

	"github.com/uroce/uroce/qp"
)

// SRQInit gives a shared receive queue's capacities (ibv_srq_init_attr).
type SRQInit struct {
	MaxWR  int
	MaxSGE int
	Limit  int // srq_limit: LimitReached reports when fewer receives remain
}

// SRQ is a shared receive queue (ibv_srq): receives consumed by any QP
// attached to it.
type SRQ struct {
	pd   *PD
	init SRQInit
	uses uses // QPs attached

	mu sync.Mutex // guards q; taken after a QP's lock
	q  *qp.SRQ
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (pd *PD) CreateSRQ(init SRQInit) (*SRQ, error) {
	lim := &pd.dev.attr.Limits
	if init.MaxWR < 1 || init.MaxWR > lim.MaxSRQWR {
		return nil, fmt.Errorf("create srq: max_wr %d, want 1 to %d: %w", init.MaxWR, lim.MaxSRQWR, ErrInvalidArg)
	}
	if init.MaxSGE < 1 || init.MaxSGE > lim.MaxSGE {
		return nil, fmt.Errorf("create srq: max_sge %d, want 1 to %d: %w", init.MaxSGE, lim.MaxSGE, ErrInvalidArg)
	}
	if err := pd.use("create srq"); err != nil {
		return nil, err
	}
	s := &SRQ{pd: pd, init: init, q: qp.NewSRQ(init.MaxWR, init.MaxSGE)}
	if init.Limit > 0 {
		s.q.SetLimit(init.Limit)
	}
	return s, nil
}

// PostRecv posts a receive work request to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	if s.uses.over() {
		return fmt.Errorf("post srq recv: %w", ErrDestroyed)
	}
	s.mu.Lock()
	err := s.q.PostRecv(wr)
	s.mu.Unlock()
	return err
}

// Resize gives the SRQ room for n receives (ibv_modify_srq with
// IBV_SRQ_MAX_WR), keeping those posted; ErrInvalidArg when n is out of
// the device's range or below the receives posted.
func (s *SRQ) Resize(n int) error {
	if lim := s.pd.dev.attr.Limits.MaxSRQWR; n < 1 || n > lim {
		return fmt.Errorf("resize srq: max_wr %d, want 1 to %d: %w", n, lim, ErrInvalidArg)
	}
	if s.uses.over() {
		return fmt.Errorf("resize srq: %w", ErrDestroyed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.q.Resize(n); err != nil {
		return fmt.Errorf("%w: %w", err, ErrInvalidArg)
	}
	s.init.MaxWR = n
	return nil
}

// Len returns the number of receives posted and not yet consumed.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.Len()
}

// SetLimit arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT); zero
// disarms it.
func (s *SRQ) SetLimit(limit int) {
	s.mu.Lock()
	s.q.SetLimit(limit)
	s.mu.Unlock()
}

// LimitReached reports, once, that the posted receives fell below the
// armed limit (IBV_EVENT_SRQ_LIMIT_REACHED); the limit is then disarmed.
func (s *SRQ) LimitReached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.LimitReached()
}

// Destroy destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy while
// QPs use it.
func (s *SRQ) Destroy() error {
	if err := s.uses.end(); err != nil {
		return fmt.Errorf("destroy srq: %w", err)
	}
	s.pd.uses.drop()
	return nil
}

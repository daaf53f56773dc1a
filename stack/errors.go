package stack

import (
	"errors"

	"github.com/uroce/uroce/qp"
)

// Errors returned by verbs calls. Protocol failures are not Go errors:
// they are completion statuses. Errors from the transport (qp.ErrQueueFull,
// qp.ErrInvalidState, qp.ErrInvalidAttr, qp.ErrTooManySGE,
// qp.ErrInvalidWR) are returned wrapped and match with errors.Is; the
// same sentinels are re-exported here.
var (
	ErrClosed       = errors.New("device closed")
	ErrDestroyed    = errors.New("object destroyed")
	ErrBusy         = errors.New("resource in use")
	ErrInvalidArg   = errors.New("invalid argument")
	ErrNoResources  = errors.New("out of resources")
	ErrCQOverrun    = errors.New("completion queue overrun")
	ErrNoNeighbor   = errors.New("no link-layer address for destination")
	ErrUnsupported  = errors.New("not supported")
	ErrQueueFull    = qp.ErrQueueFull
	ErrInvalidState = qp.ErrInvalidState
	ErrInvalidAttr  = qp.ErrInvalidAttr
	ErrTooManySGE   = qp.ErrTooManySGE
	ErrInvalidWR    = qp.ErrInvalidWR
)

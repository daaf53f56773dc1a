package stack

import (
	"errors"

	"github.com/uroce/uroce/link"
)

// Link is one receive and one transmit queue of a network interface, or
// one end of an in-memory pipe: batch I/O of whole Ethernet frames. It
// is link.Link, where its contract is written.
type Link = link.Link

// ErrLinkClosed is returned by operations on a closed link.
var ErrLinkClosed = errors.New("link closed")

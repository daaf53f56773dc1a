//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Link needs Linux: network namespaces, XDP and AF_XDP.
func Link(ctx context.Context, o LinkOptions) (*LinkReport, error) {
	return nil, errors.New("uroce bench runs on Linux only (network namespaces, XDP and AF_XDP)")
}

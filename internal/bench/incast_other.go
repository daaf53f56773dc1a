//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Incast needs Linux: network namespaces, XDP and AF_XDP.
func Incast(ctx context.Context, o IncastOptions) (*IncastReport, error) {
	return nil, errors.New("uroce bench runs on Linux only (network namespaces, XDP and AF_XDP)")
}

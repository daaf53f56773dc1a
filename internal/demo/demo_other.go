//go:build !linux

package demo

import (
	"context"
	"errors"
)

// Run needs Linux: network namespaces, XDP and AF_XDP.
func Run(ctx context.Context, o Options) (*Report, error) {
	return nil, errors.New("uroce demo runs on Linux only (network namespaces, XDP and AF_XDP)")
}

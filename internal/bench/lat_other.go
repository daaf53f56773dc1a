//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Lat needs Linux: network namespaces, XDP and AF_XDP.
func Lat(ctx context.Context, o LatOptions) (*LatReport, error) {
	return nil, errors.New("uroce bench runs on Linux only (network namespaces, XDP and AF_XDP)")
}

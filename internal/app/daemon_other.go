//go:build !linux

package app

import (
	"context"
	"errors"

	"github.com/uroce/uroce/verbs"
)

func openDaemon(ctx context.Context, socket string) (verbs.Device, error) {
	return nil, errors.New("the uroce daemon runs on Linux only")
}

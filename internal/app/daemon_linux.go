package app

import (
	"context"

	"github.com/uroce/uroce/client"
	"github.com/uroce/uroce/verbs"
)

func openDaemon(ctx context.Context, socket string) (verbs.Device, error) {
	d, err := client.Open(ctx, socket)
	if err != nil {
		return nil, err
	}
	return d, nil
}

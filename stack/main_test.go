package stack

import (
	"os"
	"testing"

	"github.com/uroce/uroce/internal/leakcheck"
)

// TestMain fails the package when a goroutine started by its tests, an
// engine's above all, outlives them: every device is closed by then.
func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

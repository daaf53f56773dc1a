package daemon_test

import (
	"os"
	"testing"

	"github.com/uroce/uroce/internal/leakcheck"
)

// TestMain fails the package when a goroutine started by its tests (a
// session's, a server's, an engine's) outlives them: every server is
// shut down and every client closed by then.
func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

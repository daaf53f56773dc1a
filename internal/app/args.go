package app

import (
	"context"
	"flag"
	"net"
	"strconv"
	"time"

	"github.com/uroce/uroce/internal/oob"
)

// ParseArgs parses args into fs, flags allowed before, between and after
// the other arguments as getopt allows them to the stock tools ("--" ends
// the flags), and returns the other arguments.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if len(args) > len(left) && args[len(args)-len(left)-1] == "--" {
			return append(rest, left...), nil
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// Aliases registers flags under several names each (as -s and --size),
// with no usage text: the tools print their own.
type Aliases struct{ *flag.FlagSet }

// Int registers p under names, its value the default.
func (a Aliases) Int(p *int, names ...string) {
	for _, n := range names {
		a.IntVar(p, n, *p, "")
	}
}

// Bool registers p under names, its value the default.
func (a Aliases) Bool(p *bool, names ...string) {
	for _, n := range names {
		a.BoolVar(p, n, *p, "")
	}
}

// String registers p under names, its value the default.
func (a Aliases) String(p *string, names ...string) {
	for _, n := range names {
		a.StringVar(p, n, *p, "")
	}
}

// Connector returns the tools' connect function for the out-of-band
// exchange on TCP port port: without a host the server's, which listens
// and accepts one connection; with one the client's, which dials it and
// retries a refused connection for wait (the stock clients try once;
// retrying lets a client start alongside its server).
func Connector(host string, port int, wait time.Duration) func(ctx context.Context) (net.Conn, error) {
	if host == "" {
		addr := ":" + strconv.Itoa(port)
		return func(ctx context.Context) (net.Conn, error) { return oob.Listen(ctx, addr) }
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	return func(ctx context.Context) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return oob.Dial(dctx, addr, 100*time.Millisecond)
	}
}

//go:build !unix

package polylimit

import "net"

// connCheck: no check without a non-blocking read (a closed connection is
// found by the check that uses it, decided by on_store_error).
func connCheck(net.Conn) error { return nil }

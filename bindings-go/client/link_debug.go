//go:build !polylimit_release

package client

// The static library the main package links (`make go-capi`, cargo's debug
// profile); `-tags polylimit_release` links target/release instead.

// #cgo LDFLAGS: ${SRCDIR}/../../target/debug/libpolylimit_capi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"

//go:build !polylimit_release

package polylimit

// The static library `make go-capi` builds (cargo's debug profile); build with
// `-tags polylimit_release` to link target/release instead (`make go-bench`).

// #cgo LDFLAGS: ${SRCDIR}/../target/debug/libpolylimit_capi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
import "C"

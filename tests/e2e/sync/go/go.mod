module github.com/polylimit/polylimit/tests/e2e/sync/go

go 1.23

require github.com/polylimit/polylimit/bindings-go v0.0.0

// The module in this repository (cgo links the core it builds in ../../../../target).
replace github.com/polylimit/polylimit/bindings-go => ../../../../bindings-go

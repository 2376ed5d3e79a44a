//go:build tools

// Package peers pins MetalLB's controller and speaker (both `package main` in MetalLB's own
// module) so that `go build go.universe.tf/metallb/controller` and `.../speaker` build them
// from this module, at the version go.mod requires, with its dependencies as go.sum records.
package peers

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)

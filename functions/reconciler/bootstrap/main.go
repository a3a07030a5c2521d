// Command bootstrap is the reconciler function's Lambda binary: the nightly reconciler: every account's cycles compared with the providers' meters, repaired from the ledger with evidence.
// What it runs is composed in package reconciler (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/reconciler"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(reconciler.Builder) }

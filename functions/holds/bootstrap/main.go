// Command bootstrap is the holds function's Lambda binary: the usage holds routes: reserve, charge, settle, read.
// What it runs is composed in package holds (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/holds"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(holds.Builder) }

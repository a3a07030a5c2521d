// Command bootstrap is the sweeper function's Lambda binary: the holds sweeper: every minute it settles holds whose lease lapsed.
// What it runs is composed in package sweeper (the folder above).
package main

import (
	"github.com/ferrymeter/ferry/functions/sweeper"
	"github.com/ferrymeter/ferry/internal/platform/compose"
)

func main() { compose.Run(sweeper.Builder) }

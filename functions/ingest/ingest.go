// Package ingest composes the ingest function: the event routes, which authenticate the account,
// run the advisory gate and queue each event.
package ingest

import (
	"github.com/ferrymeter/ferry/internal/metering/ingest"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/metering/usage"
	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Builder composes the ingest function from its entry in resources.Functions.
var Builder = compose.Builder{Function: resources.FunctionIngest, Build: build}

// Parts are the services the ingest function runs on.
type Parts struct {
	Usage  usage.Table
	Ledger *ledger.Table
	Ingest *ingest.Service
	HTTP   *httpapi.Server
}

// PartsOf returns the parts of a function Builder built.
func PartsOf(fn *compose.Function) *Parts { p, _ := fn.Parts.(*Parts); return p }

func build(c *compose.Composer) (*compose.Function, error) {
	// Earlier releases chose their worker design by this setting; a deployment that still asks
	// for the retired one is refused rather than given the other.
	if err := c.RetiredBool(resources.EnvRetiredBatchMode, true, resources.RetiredBatchModeWhy); err != nil {
		return nil, err
	}
	// The advisory gate reads the ledger (is this a retry?) and the budget row; it writes nothing.
	p := &Parts{Usage: usage.Table{DB: c.DynamoDB(), Name: c.Table(resources.TableUsage, resources.Read)}}
	p.Ledger = &ledger.Table{DB: c.DynamoDB(), Table: c.Table(resources.TableLedger, resources.Read), Usage: p.Usage}
	p.Ingest = &ingest.Service{
		Queue:  &ingest.SQSQueue{Client: c.Clients.SQS, URL: c.QueueURL(resources.QueueEvents, resources.Send), Meters: c.Config.Catalog.Meters},
		Ledger: p.Ledger, Usage: p.Usage, Catalog: c.Config.Catalog, Metrics: c.Metrics, Log: c.Log, Now: c.Now,
	}
	fn := c.Function(p)
	p.HTTP = httpapi.Serve(c, fn, (&routes{Ingest: p.Ingest}).handlers(), httpapi.Authentication{})
	return fn, nil
}

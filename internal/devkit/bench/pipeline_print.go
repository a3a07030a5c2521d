package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/devkit/instrument"
	"github.com/ferrymeter/ferry/internal/metering/ledger"
	"github.com/ferrymeter/ferry/internal/operator/figures"
)

// pipelineFigures are one phase's figures per accepted event, and its cost per million accepted
// events.
type pipelineFigures struct {
	dynamoCalls, readUnits, writeUnits, budgetTx, s3Put, s3Other, sqs, invocations float64
	ingestCPU, workerCPU                                                           time.Duration
	throughput                                                                     float64
	costAPI, costDynamo, costS3, costSQS, costLambda, costCompute                  float64
}

func (f pipelineFigures) total() float64 {
	return f.costAPI + f.costDynamo + f.costS3 + f.costSQS + f.costLambda + f.costCompute
}

// perAccepted turns a phase's counts into figures per accepted event (every distinct event is
// accepted: the account's limit is the run's size). The cost model, at on-demand us-east-1 list
// prices (bench.go):
//
//	API Gateway (HTTP API)  ingest requests × $1.00/M
//	Lambda requests         (ingest requests + worker invocations, as counted) × $0.20/M
//	Lambda compute          Ferry's CPU time × 0.5 GB × $0.0000133334/GB-s (a lower bound: Lambda
//	                        bills wall time, which waiting on DynamoDB adds to)
//	SQS                     send, receive and delete calls × $0.40/M
//	DynamoDB on-demand      write units × $0.625/M + read units × $0.125/M, counted at the client
//	S3                      PUTs × $0.005/1,000 + other requests × $0.0004/1,000
func perAccepted(r phaseResult, accepted int) pipelineFigures {
	var f pipelineFigures
	a := float64(accepted)
	for op, n := range r.calls {
		switch {
		case strings.HasPrefix(op, "DynamoDB "):
			f.dynamoCalls += float64(n)
		case op == "S3 PutObject":
			f.s3Put += float64(n)
		case strings.HasPrefix(op, "S3 "):
			f.s3Other += float64(n)
		case strings.HasPrefix(op, "SQS "):
			f.sqs += float64(n)
		}
	}
	var u instrument.OpUsage
	for _, o := range r.units {
		u.ReadUnits += o.ReadUnits
		u.WriteUnits += o.WriteUnits
	}
	f.readUnits, f.writeUnits, f.budgetTx = u.ReadUnits, u.WriteUnits, float64(r.budgetTx)
	f.invocations = float64(r.requests + r.invoked)
	perMillion := 1e6 / a
	f.costAPI = float64(r.requests) * priceAPIGatewayPerMillion / 1e6 * perMillion
	f.costDynamo = (u.WriteUnits*priceDynamoWriteUnitPerMillion + u.ReadUnits*priceDynamoReadUnitPerMillion) / 1e6 * perMillion
	f.costS3 = (f.s3Put*priceS3PutPerThousand + f.s3Other*priceS3GetPerThousand) / 1e3 * perMillion
	f.costSQS = f.sqs * priceSQSPerMillion / 1e6 * perMillion
	f.costLambda = f.invocations * priceLambdaPerMillion / 1e6 * perMillion
	cpu := r.ingestCPU + r.workerCPU
	f.costCompute = cpu.Seconds() * benchLambdaMemGB * priceLambdaGBSecondArm * perMillion
	f.ingestCPU = time.Duration(float64(r.ingestCPU) / a)
	f.workerCPU = time.Duration(float64(r.workerCPU) / a)
	f.throughput = a / r.workerWall.Seconds()
	f.dynamoCalls, f.readUnits, f.writeUnits, f.budgetTx = f.dynamoCalls/a, f.readUnits/a, f.writeUnits/a, f.budgetTx/a
	f.s3Put, f.s3Other, f.sqs, f.invocations = f.s3Put/a, f.s3Other/a, f.sqs/a, f.invocations/a
	return f
}

func printPipeline(w io.Writer, results []phaseResult, distinct, dups int) {
	figs := make([]pipelineFigures, len(results))
	var naive pipelineFigures
	for i, r := range results {
		figs[i] = perAccepted(r, distinct)
		if r.phase.naive {
			naive = figs[i]
		}
	}
	var t table
	head := []string{""}
	for _, r := range results {
		head = append(head, r.name)
	}
	t.add(head...)
	line := func(name string, cell func(i int, r phaseResult) string) {
		cells := []string{name}
		for i, r := range results {
			cells = append(cells, cell(i, r))
		}
		t.add(cells...)
	}
	line("events per ingest request", func(_ int, r phaseResult) string { return fmt.Sprint(r.phase.request) })
	line("messages per worker invocation (at most)", func(_ int, r phaseResult) string { return fmt.Sprint(r.phase.invocation) })
	line("events sent (with the duplicates)", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.delivered)) })
	line("  … of them sent a second time", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.delivered - distinct)) })
	line("queue messages", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.messages)) })
	line("worker invocations", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.invoked)) })
	line(fmt.Sprintf("meter after the run (exact: %s)", figures.Thousands(int64(distinct))), func(_ int, r phaseResult) string { return figures.Thousands(r.meter) })
	line("ledger", func(_ int, r phaseResult) string {
		if r.phase.naive {
			return "(none)"
		}
		return ledgerSummary(r.ledger)
	})
	line("archive objects", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.archived)) })
	line("analytics rows", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.rows)) })
	line("  … in units' rows items (items)", func(_ int, r phaseResult) string { return figures.Thousands(int64(r.rowsItems)) })
	t.add("per accepted event:")
	num := func(name, format string, v func(f pipelineFigures) float64) {
		line("  "+name, func(i int, _ phaseResult) string { return fmt.Sprintf(format, v(figs[i])) })
	}
	num("DynamoDB round trips", "%.3f", func(f pipelineFigures) float64 { return f.dynamoCalls })
	num("DynamoDB read request units", "%.3f", func(f pipelineFigures) float64 { return f.readUnits })
	num("DynamoDB write request units", "%.3f", func(f pipelineFigures) float64 { return f.writeUnits })
	num("budget-row transactions", "%.3f", func(f pipelineFigures) float64 { return f.budgetTx })
	num("S3 PUT requests", "%.3f", func(f pipelineFigures) float64 { return f.s3Put })
	num("S3 other requests", "%.3f", func(f pipelineFigures) float64 { return f.s3Other })
	num("SQS requests (send, receive, delete)", "%.3f", func(f pipelineFigures) float64 { return f.sqs })
	num("Lambda invocations (ingest + worker)", "%.3f", func(f pipelineFigures) float64 { return f.invocations })
	num("Ferry CPU in ingest (µs)", "%.0f", func(f pipelineFigures) float64 { return us(f.ingestCPU) })
	num("Ferry CPU in the worker (µs)", "%.0f", func(f pipelineFigures) float64 { return us(f.workerCPU) })
	num("worker throughput on the emulators (events/s)", "%.0f", func(f pipelineFigures) float64 { return f.throughput })
	num("  … against the naive worker", "%.2f×", func(f pipelineFigures) float64 { return f.throughput / naive.throughput })
	t.add("cost per million accepted events (USD), each column's resends included:")
	num("API Gateway (HTTP API)", "%.3f", func(f pipelineFigures) float64 { return f.costAPI })
	num("Lambda requests", "%.3f", func(f pipelineFigures) float64 { return f.costLambda })
	num("Lambda compute (lower bound: CPU at 512 MB)", "%.4f", func(f pipelineFigures) float64 { return f.costCompute })
	num("SQS requests", "%.3f", func(f pipelineFigures) float64 { return f.costSQS })
	num("DynamoDB on-demand", "%.3f", func(f pipelineFigures) float64 { return f.costDynamo })
	num("S3 requests", "%.3f", func(f pipelineFigures) float64 { return f.costS3 })
	num("total", "%.3f", func(f pipelineFigures) float64 { return f.total() })
	t.print(w)

	for _, r := range results {
		if r.phase.naive {
			continue
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s: DynamoDB calls per accepted event, by operation:\n", r.name)
		var ops []string
		for op := range r.units {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		for _, op := range ops {
			u := r.units[op]
			fmt.Fprintf(w, "  %-20s %6.3f calls  %6.3f RRU  %6.3f WRU  (%d refused)\n", op,
				float64(u.Calls)/float64(distinct), u.ReadUnits/float64(distinct), u.WriteUnits/float64(distinct), u.Errors)
		}
	}
	maxItem, maxRows := 0, 0
	for _, r := range results {
		maxItem, maxRows = max(maxItem, r.maxItem), max(maxRows, r.maxRows)
	}
	fmt.Fprintf(w, "\nLargest unit's rows item: %d bytes, a transactional write of %d WRU. Largest other stored item:\n", maxRows, 2*((maxRows+1023)/1024))
	fmt.Fprintf(w, "%d bytes. Under 1 KB, every write is 1 WRU (2 in a transaction) and every read\n", maxItem)
	fmt.Fprintln(w, "1 RRU strongly consistent or 0.5 eventually, which is how the units above are counted where the")
	fmt.Fprintln(w, "endpoint does not report consumed capacity (emulators don't; AWS does). Prices: us-east-1 on-demand")
	fmt.Fprintln(w, "list prices. Throughput is emulator wall time on this machine: compare columns, not absolute numbers.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Hot-account ceiling: one budget row takes about 1,000 write units a second, and a transactional")
	fmt.Fprintln(w, "write costs it 2, so about 500 budget-row transactions a second. Events a second for one free")
	fmt.Fprintln(w, "account = 500 / (budget-row transactions per event):")
	for i, r := range results {
		if figs[i].budgetTx > 0 {
			fmt.Fprintf(w, "  %-10s %.3f per event → about %s events/s\n", r.name, figs[i].budgetTx, figures.Thousands(int64(500/figs[i].budgetTx)))
		}
	}
}

func ledgerSummary(m map[ledger.Status]int) string {
	var parts []string
	for _, s := range []ledger.Status{ledger.Inserted, ledger.Rejected, ledger.Uninsertable, ledger.Inserting} {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", figures.Thousands(int64(m[s])), s))
		}
	}
	return strings.Join(parts, ", ")
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// table prints aligned rows: the first column left-aligned, the others right-aligned.
type table struct {
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer) {
	widths := map[int]int{}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, r := range t.rows {
		for i, c := range r {
			pad := widths[i] - len([]rune(c))
			if i == 0 {
				fmt.Fprint(w, c+strings.Repeat(" ", pad))
			} else {
				fmt.Fprint(w, "  "+strings.Repeat(" ", pad)+c)
			}
		}
		fmt.Fprintln(w)
	}
}

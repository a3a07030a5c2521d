package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ferrymeter/ferry/internal/figures"
	"github.com/ferrymeter/ferry/internal/instrument"
	"github.com/ferrymeter/ferry/internal/ledger"
)

// pipelineFigures are one phase's per-delivery figures and cost.
type pipelineFigures struct {
	dynamoCalls, readUnits, writeUnits, s3Put, s3Other, sqs float64
	ingestCPU, workerCPU                                    time.Duration
	throughput                                              float64
	costDynamo, costS3, costSQS, costLambda, costCompute    float64
}

func perDelivery(r phaseResult, distinct int) pipelineFigures {
	var f pipelineFigures
	d := float64(r.delivered)
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
	f.readUnits, f.writeUnits = u.ReadUnits, u.WriteUnits
	// Cost of the whole run, then per million distinct events (duplicates' cost included).
	perMillion := 1e6 / float64(distinct)
	f.costDynamo = (u.WriteUnits*priceDynamoWriteUnitPerMillion + u.ReadUnits*priceDynamoReadUnitPerMillion) / 1e6 * perMillion
	f.costS3 = (f.s3Put*priceS3PutPerThousand + f.s3Other*priceS3GetPerThousand) / 1e3 * perMillion
	f.costSQS = f.sqs * priceSQSPerMillion / 1e6 * perMillion
	invocations := d/benchIngestBatch + d/10 // ingest batches of 100, worker batches of 10
	f.costLambda = invocations * priceLambdaPerMillion / 1e6 * perMillion
	cpu := r.ingestCPU + r.workerCPU
	f.costCompute = cpu.Seconds() * benchLambdaMemGB * priceLambdaGBSecondArm * perMillion
	f.ingestCPU = time.Duration(float64(r.ingestCPU) / d)
	f.workerCPU = time.Duration(float64(r.workerCPU) / d)
	f.throughput = d / r.workerWall.Seconds()
	f.dynamoCalls, f.readUnits, f.writeUnits = f.dynamoCalls/d, f.readUnits/d, f.writeUnits/d
	f.s3Put, f.s3Other, f.sqs = f.s3Put/d, f.s3Other/d, f.sqs/d
	return f
}

func printPipeline(w io.Writer, results []phaseResult, distinct, dups int) {
	ferry, naive := results[0], results[1]
	ff, nf := perDelivery(ferry, distinct), perDelivery(naive, distinct)
	var t table
	t.add("", "Ferry", "naive apply-on-arrival", "Ferry / naive")
	t.add("deliveries to the worker", figures.Thousands(int64(ferry.delivered)), figures.Thousands(int64(naive.delivered)), "")
	t.add(fmt.Sprintf("meter after the run (exact: %s)", figures.Thousands(int64(distinct))), figures.Thousands(ferry.meter), figures.Thousands(naive.meter), "")
	t.add("ledger", ledgerSummary(ferry.ledger), "(none)", "")
	t.add("archive objects", figures.Thousands(int64(ferry.archived)), figures.Thousands(int64(naive.archived)), "")
	t.add("analytics rows", figures.Thousands(int64(ferry.rows)), figures.Thousands(int64(naive.rows)), "")
	t.add("per delivery:", "", "", "")
	row := func(name string, a, b float64, format string) {
		ratio := ""
		if b > 0 {
			ratio = fmt.Sprintf("%.2f×", a/b)
		}
		t.add("  "+name, fmt.Sprintf(format, a), fmt.Sprintf(format, b), ratio)
	}
	row("DynamoDB round trips", ff.dynamoCalls, nf.dynamoCalls, "%.2f")
	row("DynamoDB read request units", ff.readUnits, nf.readUnits, "%.2f")
	row("DynamoDB write request units", ff.writeUnits, nf.writeUnits, "%.2f")
	row("S3 PUT requests", ff.s3Put, nf.s3Put, "%.2f")
	row("S3 other requests", ff.s3Other, nf.s3Other, "%.2f")
	row("SQS requests (send, receive, delete)", ff.sqs, nf.sqs, "%.3f")
	row("Ferry CPU in ingest (µs)", us(ff.ingestCPU), us(nf.ingestCPU), "%.0f")
	row("Ferry CPU in the worker (µs)", us(ff.workerCPU), us(nf.workerCPU), "%.0f")
	row("worker throughput on the emulators (deliveries/s)", ff.throughput, nf.throughput, "%.0f")
	t.add(fmt.Sprintf("cost per million events, %d%% delivered twice (USD):", 100*dups/distinct), "", "", "")
	row("DynamoDB on-demand", ff.costDynamo, nf.costDynamo, "%.3f")
	row("S3 requests", ff.costS3, nf.costS3, "%.3f")
	row("SQS requests", ff.costSQS, nf.costSQS, "%.3f")
	row("Lambda requests", ff.costLambda, nf.costLambda, "%.3f")
	row("Lambda compute (lower bound: CPU time at 512 MB)", ff.costCompute, nf.costCompute, "%.4f")
	row("total", ff.costDynamo+ff.costS3+ff.costSQS+ff.costLambda+ff.costCompute,
		nf.costDynamo+nf.costS3+nf.costSQS+nf.costLambda+nf.costCompute, "%.3f")
	t.print(w)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Ferry's DynamoDB calls per delivery, by operation:")
	var ops []string
	for op := range ferry.units {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		u := ferry.units[op]
		fmt.Fprintf(w, "  %-20s %6.3f calls  %6.3f RRU  %6.3f WRU  (%d refused)\n", op,
			float64(u.Calls)/float64(ferry.delivered), u.ReadUnits/float64(ferry.delivered), u.WriteUnits/float64(ferry.delivered), u.Errors)
	}
	fmt.Fprintf(w, "\nLargest stored item: %d bytes (Ferry) / %d bytes (naive). Under 1 KB, every write is 1 WRU (2 in a\n", ferry.maxItem, naive.maxItem)
	fmt.Fprintln(w, "transaction) and every read 1 RRU strongly consistent or 0.5 eventually, which is how the units above")
	fmt.Fprintln(w, "are counted where the endpoint does not report consumed capacity (emulators don't; AWS does).")
	fmt.Fprintln(w, "Prices: us-east-1 on-demand list prices. Throughput is emulator wall time on this machine: compare the")
	fmt.Fprintln(w, "two columns, not the absolute numbers.")
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

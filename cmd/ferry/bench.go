package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ferrymeter/ferry/internal/cloud"
)

// benches are the benchmark programs `ferry bench <name>` runs.
var benches = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"pipeline": benchPipeline,
	"holds":    runBenchHolds,
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		return fmt.Errorf("usage: ferry bench <%s> [flags]", strings.Join(names, "|"))
	}
	b, ok := benches[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (have %s)", args[0], strings.Join(names, ", "))
	}
	return b(ctx, args[1:], stdout, stderr)
}

// benchEndpoints returns the endpoints a benchmark measures against: FERRY_*_ENDPOINT when set,
// otherwise emulators in a child process, so this process's CPU time is Ferry's alone.
func benchEndpoints() (cloud.Endpoints, func(), error) {
	if e := cloud.EndpointsFromEnv(); e.Local() {
		if e.DynamoDB == "" || e.S3 == "" || e.SQS == "" {
			return cloud.Endpoints{}, nil, fmt.Errorf("set all of FERRY_DYNAMODB_ENDPOINT, FERRY_S3_ENDPOINT and FERRY_SQS_ENDPOINT, or none")
		}
		return e, func() {}, nil
	}
	p, err := startEmulatorProcess()
	if err != nil {
		return cloud.Endpoints{}, nil, err
	}
	return p.Endpoints, p.Stop, nil
}

// cpuTime is this process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// On-demand list prices in us-east-1, in dollars, used to turn counts into cost.
const (
	priceDynamoWriteUnitPerMillion = 0.625  // DynamoDB on-demand, per million write request units
	priceDynamoReadUnitPerMillion  = 0.125  // per million read request units
	priceS3PutPerThousand          = 0.005  // S3 Standard PUT, COPY, POST, LIST
	priceS3GetPerThousand          = 0.0004 // S3 Standard GET and others
	priceSQSPerMillion             = 0.40   // SQS standard queue requests (64 KB chunks)
	priceLambdaPerMillion          = 0.20   // Lambda requests
	priceLambdaGBSecondArm         = 0.0000133334
)

// table prints aligned rows.
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

// thousands formats an integer with thousands separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

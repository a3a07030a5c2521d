// Command bench measures the Batcher's throughput against a running Ferry, side by side with a
// bare HTTP client posting the same batches: events per second each way, alternating rounds on
// fresh accounts, and their ratio (the goal is at least 0.9). It is a program, not a test: run
// it against ferry dev (make bench-sdk starts one).
//
//	FERRY_SDK_STACK_URL=http://127.0.0.1:8080 go run ./internal/bench -events 20000
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	ferry "github.com/ferrymeter/ferry/sdk/go"
)

func main() {
	events := flag.Int("events", 5_000, "events per round and side")
	rounds := flag.Int("rounds", 4, "rounds (even, so each side goes first as often); each runs both sides")
	concurrency := flag.Int("concurrency", ferry.DefaultConcurrency, "batch requests in flight at once, on both sides")
	flag.Parse()
	base := os.Getenv("FERRY_SDK_STACK_URL")
	admin := os.Getenv("FERRY_ADMIN_KEY")
	if admin == "" {
		admin = "dev-admin-key"
	}
	if base == "" {
		log.Fatal("FERRY_SDK_STACK_URL names no stack")
	}
	ctx := context.Background()
	op, err := ferry.New(ferry.Config{BaseURL: base, APIKey: admin})
	if err != nil {
		log.Fatal(err)
	}
	var sdkRates, bareRates, ratios, sdkCPU, bareCPU []float64
	for r := range *rounds {
		sides := []func() (float64, float64){
			func() (float64, float64) {
				return measured(ctx, base, *events, func() (float64, string) { return runSDK(ctx, op, base, *events, *concurrency) })
			},
			func() (float64, float64) {
				return measured(ctx, base, *events, func() (float64, string) { return runBare(ctx, op, base, *events, *concurrency) })
			},
		}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		a, ac := sides[0]()
		b, bc := sides[1]()
		if r%2 == 1 {
			a, ac, b, bc = b, bc, a, ac
		}
		sdkRates, bareRates, ratios = append(sdkRates, a), append(bareRates, b), append(ratios, a/b)
		sdkCPU, bareCPU = append(sdkCPU, ac), append(bareCPU, bc)
		fmt.Printf("round %d: batcher %.0f events/s, bare client %.0f events/s, ratio %.2f; client CPU %.1f µs/event vs %.1f\n", r+1, a, b, a/b, ac, bc)
	}
	fmt.Printf("go: client CPU per event: batcher %.1f µs, bare client %.1f µs (medians)\n", median(sdkCPU), median(bareCPU))
	fmt.Printf("go: %d events a side, %d requests in flight: batcher %.0f events/s, bare client %.0f events/s (medians of %d rounds); ratio %.2f× (geometric mean of the rounds' ratios)\n",
		*events, *concurrency, median(sdkRates), median(bareRates), *rounds, geomean(ratios))
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// measured runs a side and returns its rate and this process's CPU time per event (user and
// system, in µs): the client's own cost, which the machine's other load changes far less than
// it changes the rate. Then it waits for the worker to bill the side's events.
func measured(ctx context.Context, base string, events int, side func() (float64, string)) (float64, float64) {
	before := cpuTime()
	rate, key := side()
	cpu := float64((cpuTime() - before).Microseconds()) / float64(events)
	drain(ctx, base, key, events)
	return rate, cpu
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// geomean is the geometric mean: the ratios of rounds where either side went first weigh alike.
func geomean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += math.Log(x)
	}
	return math.Exp(sum / float64(len(xs)))
}

// account creates a fresh account with room for the run's events.
func account(ctx context.Context, op *ferry.Client, prefix string, events int) string {
	var b [4]byte
	rand.Read(b[:])
	room := 2 * events
	a, err := op.CreateAccount(ctx, ferry.CreateAccountRequest{Id: prefix + "-" + hex.EncodeToString(b[:]), Limits: &ferry.Limits{"events": &room}})
	if err != nil {
		log.Fatal(err)
	}
	return a.ApiKey
}

// drainWait bounds how long a side waits for the worker to bill what it sent.
const drainWait = 5 * time.Minute

// drain waits until the worker has billed every event a side sent, so the next side starts on an
// idle stack rather than racing the worker for the machine's two cores.
func drain(ctx context.Context, base, key string, events int) {
	c, err := ferry.New(ferry.Config{BaseURL: base, APIKey: key})
	if err != nil {
		log.Fatal(err)
	}
	feature := "events"
	for deadline := time.Now().Add(drainWait); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		u, err := c.Usage(ctx, ferry.GetUsageParams{Feature: &feature})
		if err != nil {
			log.Fatal(err)
		}
		if u.Used == events {
			return
		}
	}
	log.Fatalf("the worker did not bill %d events within %s", events, drainWait)
}

func runSDK(ctx context.Context, op *ferry.Client, base string, events, concurrency int) (float64, string) {
	key := account(ctx, op, "bench-go-sdk", events)
	c, err := ferry.New(ferry.Config{BaseURL: base, APIKey: key})
	if err != nil {
		log.Fatal(err)
	}
	b, err := c.NewBatcher(ferry.BatcherConfig{Concurrency: concurrency})
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	for i := range events {
		if _, err := b.Add(ctx, ferry.CloudEvent{Source: "/bench", Type: "api.call", Data: map[string]int{"n": i}}); err != nil {
			log.Fatal(err)
		}
	}
	if err := b.Close(ctx); err != nil {
		log.Fatal(err)
	}
	return float64(events) / time.Since(start).Seconds(), key
}

// bareEvent is an event as a hand-rolled client would post it.
type bareEvent struct {
	Specversion string         `json:"specversion"`
	ID          string         `json:"id"`
	Source      string         `json:"source"`
	Type        string         `json:"type"`
	Data        map[string]int `json:"data"`
}

// runBare posts the same batches with net/http alone, as a careful hand-written client would:
// ids minted per event and an Idempotency-Key per request (so Ferry does the same work for both
// sides, and the ratio is the client's own cost), no retries, the same number of requests in
// flight.
func runBare(ctx context.Context, op *ferry.Client, base string, events, concurrency int) (float64, string) {
	key := account(ctx, op, "bench-go-bare", events)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	batches := make(chan []bareEvent)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				body, _ := json.Marshal(batch)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events/batch", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", ferry.NewEventID())
				resp, err := client.Do(req)
				if err != nil {
					log.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					log.Fatalf("bare batch: %s", resp.Status)
				}
			}
		}()
	}
	batch := make([]bareEvent, 0, ferry.MaxBatchEvents)
	for i := range events {
		batch = append(batch, bareEvent{Specversion: "1.0", ID: ferry.NewEventID(), Source: "/bench", Type: "api.call", Data: map[string]int{"n": i}})
		if len(batch) == ferry.MaxBatchEvents {
			batches <- batch
			batch = make([]bareEvent, 0, ferry.MaxBatchEvents)
		}
	}
	if len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	return float64(events) / time.Since(start).Seconds(), key
}

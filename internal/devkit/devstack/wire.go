package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/ferrymeter/ferry/internal/platform/compose"
	"github.com/ferrymeter/ferry/internal/platform/httpapi"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Wiring is built functions served the way AWS invokes them, by kind: every HTTP function behind
// one gateway that routes the route table, every consumer behind an event source on each queue
// it consumes, every scheduled function on its schedule. Nothing in it names a function: a
// capability's function is wired from its entry and its routes.
type Wiring struct {
	Gateway *Gateway
	// Sources are the event source mappings, one per consumer and queue.
	Sources []*EventSource
	// Schedules are the scheduled functions, as EventBridge Scheduler runs them.
	Schedules []Schedule
}

// Schedule is one scheduled function.
type Schedule struct {
	Function string
	Every    time.Duration
	Run      func(ctx context.Context) error
}

// Wire serves fns by kind. Queue URLs come from names; the event sources receive through client.
func Wire(ctx context.Context, routes []resources.Route, fns []*compose.Function, names resources.Names, client *sqs.Client, log *slog.Logger) (*Wiring, error) {
	w := &Wiring{}
	handlers := map[string]httpapi.LambdaHandler{}
	for _, fn := range fns {
		switch fn.Kind() {
		case compose.HTTP:
			h, err := fn.HTTP.Handler()
			if err != nil {
				return nil, fmt.Errorf("wire %s: %w", fn.Entry.Name, err)
			}
			handlers[fn.Entry.Name] = httpapi.NewLambdaHandler(h)
		case compose.Consumer:
			for _, queue := range compose.Consumes(fn.Entry) {
				url, ok := names.Queues[queue]
				if !ok {
					return nil, fmt.Errorf("wire %s: no queue %q", fn.Entry.Name, queue)
				}
				arn, err := QueueARN(ctx, client, url)
				if err != nil {
					return nil, fmt.Errorf("wire %s: %w", fn.Entry.Name, err)
				}
				// The deployment's batch size and batching window (resources.EventSourceBatchSize).
				w.Sources = append(w.Sources, &EventSource{SQS: client, QueueURL: url, QueueARN: arn, Handler: fn.Consume, Log: log,
					BatchSize: resources.EventSourceBatchSize, Window: resources.EventSourceBatchingWindow})
			}
		case compose.Scheduled:
			every := fn.Entry.Every
			if fn.Entry.LocalEvery > 0 {
				every = fn.Entry.LocalEvery
			}
			w.Schedules = append(w.Schedules, Schedule{Function: fn.Entry.Name, Every: every, Run: fn.Run})
		default:
			return nil, fmt.Errorf("wire %s: no handler", fn.Entry.Name)
		}
	}
	gw, err := NewGateway(routes, handlers, log)
	if err != nil {
		return nil, err
	}
	w.Gateway = gw
	return w, nil
}

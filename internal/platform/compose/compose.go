// Package compose builds Ferry's Lambda functions from their entries in resources.Functions. Each
// function's package (functions/<name>) holds one Builder, which wires the services that function
// uses from a Composer that hands out only the resources the entry grants: asking for anything
// else fails when the function is built, not with an AccessDenied in AWS. Every function's main,
// ferry dev and the tests build functions through the same builders and definitions, so what runs
// locally is what runs in AWS.
//
// The package knows no capability: a builder imports what its function runs, and nothing else is
// linked into that function's binary.
package compose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ferrymeter/ferry/internal/platform/cloud"
	"github.com/ferrymeter/ferry/internal/platform/metrics"
	"github.com/ferrymeter/ferry/internal/platform/resources"
)

// Definitions are everything a Ferry deployment is made of: its resources, its functions, the
// route table and a builder per function. The CDK app deploys the same lists (infra reads them
// from internal/platform/resources); ferry dev and the tests provision and wire them. Adding a
// capability is appending to these lists and writing its function's builder.
type Definitions struct {
	Tables    []resources.Table
	Queues    []resources.Queue
	Buckets   []resources.Bucket
	Functions []resources.Function
	Routes    []resources.Route
	Builders  []Builder
}

// NewDefinitions are Ferry's resources and routes with builders. The slices are copies: a test
// may append to them.
func NewDefinitions(builders []Builder) Definitions {
	return Definitions{
		Tables:    append([]resources.Table(nil), resources.Tables...),
		Queues:    append([]resources.Queue(nil), resources.Queues...),
		Buckets:   append([]resources.Bucket(nil), resources.Buckets...),
		Functions: append([]resources.Function(nil), resources.Functions...),
		Routes:    append([]resources.Route(nil), resources.Routes...),
		Builders:  append([]Builder(nil), builders...),
	}
}

// Function returns a function's entry.
func (d Definitions) Function(name string) (resources.Function, bool) {
	for _, f := range d.Functions {
		if f.Name == name {
			return f, true
		}
	}
	return resources.Function{}, false
}

// Builder returns the builder of a function.
func (d Definitions) Builder(name string) (Builder, bool) {
	for _, b := range d.Builders {
		if b.Function == name {
			return b, true
		}
	}
	return Builder{}, false
}

// Kind is how AWS invokes a function, which is how ferry dev and the tests drive it.
type Kind int

// Function kinds. A Lambda function has one handler, so each function has exactly one kind.
const (
	// HTTP functions serve routes of the route table (or its $default route).
	HTTP Kind = iota + 1
	// Consumer functions handle batches of the queue they consume (an SQS event source).
	Consumer
	// Scheduled functions run every Every (EventBridge Scheduler).
	Scheduled
)

func (k Kind) String() string {
	switch k {
	case HTTP:
		return "HTTP"
	case Consumer:
		return "SQS consumer"
	case Scheduled:
		return "scheduled"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

func kindPhrase(k Kind) string {
	if k == 0 {
		return "no handler"
	}
	return "a " + k.String() + " handler"
}

// Kinds are the kinds a function's entry and the route table give it.
func (d Definitions) Kinds(fn resources.Function) []Kind {
	var kinds []Kind
	if resources.Serves(d.Routes, fn.Name) {
		kinds = append(kinds, HTTP)
	}
	if len(Consumes(fn)) > 0 {
		kinds = append(kinds, Consumer)
	}
	if fn.Every > 0 {
		kinds = append(kinds, Scheduled)
	}
	return kinds
}

// Consumes lists the queues fn consumes, in name order.
func Consumes(fn resources.Function) []string {
	var queues []string
	for q, access := range fn.Queues {
		if access.Consumes() {
			queues = append(queues, q)
		}
	}
	sort.Strings(queues)
	return queues
}

// Validate reports every way the definitions cannot be built: a function without exactly one
// builder or without exactly one kind, a builder or route naming no function.
func (d Definitions) Validate() error {
	var errs []error
	for _, f := range d.Functions {
		n := 0
		for _, b := range d.Builders {
			if b.Function == f.Name {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, fmt.Errorf("function %s has %d builders; it needs exactly one", f.Name, n))
		}
		if kinds := d.Kinds(f); len(kinds) != 1 {
			errs = append(errs, fmt.Errorf("function %s is %v; a Lambda function has exactly one kind (routes, a queue it consumes, or a schedule)", f.Name, kinds))
		}
	}
	for _, b := range d.Builders {
		if _, ok := d.Function(b.Function); !ok {
			errs = append(errs, fmt.Errorf("builder for %q: no such function in resources.Functions", b.Function))
		}
	}
	for _, r := range d.Routes {
		if _, ok := d.Function(r.Function); !ok {
			errs = append(errs, fmt.Errorf("route %s: no function %q", r.Key(), r.Function))
		}
	}
	return errors.Join(errs...)
}

// Builder composes one function from what its entry grants.
type Builder struct {
	// Function names the function's entry in resources.Functions.
	Function string
	// Build wires the function's services from the composer and returns the function with the
	// handler of its kind. Every resource it uses comes from the composer.
	Build func(c *Composer) (*Function, error)
}

// Server is an HTTP function's server (httpapi.Server): its routes of the table, the handler that
// serves them, and that handler behind API Gateway's payload v2 events.
type Server interface {
	Routes() []resources.Route
	Handler() (http.Handler, error)
	LambdaHandler() (any, error)
}

// Function is one composed function: the handler of its kind, and the parts its builder composed,
// which tests and tools reach through the function's package (functions/<name>.PartsOf).
type Function struct {
	Entry resources.Function
	// HTTP serves the function's routes.
	HTTP Server
	// Consume handles a batch of the queue the function consumes (partial batch failures).
	Consume func(ctx context.Context, batch events.SQSEvent) (events.SQSEventResponse, error)
	// Run is one scheduled run.
	Run func(ctx context.Context) error
	// Close, when set, stops what the function runs in the background (a key set's refresh).
	// Lambda never calls it; ferry dev and the tests do when they stop.
	Close func()
	// Parts are the services the builder composed, as a value of the function package's own
	// Parts type.
	Parts any

	Log     *slog.Logger
	Metrics metrics.Recorder
	Now     func() time.Time
}

// Kind is the kind of handler the function has.
func (f *Function) Kind() Kind {
	switch {
	case f.HTTP != nil:
		return HTTP
	case f.Consume != nil:
		return Consumer
	case f.Run != nil:
		return Scheduled
	}
	return 0
}

// Env is what functions are built in: where the resources are, the clients, the configuration,
// the settings, and the logger, metrics and clock every function of the process shares.
type Env struct {
	// Names are the physical names of every resource; each function sees only its grant.
	Names   resources.Names
	Clients cloud.Clients
	// ClientsFor, when set, gives each function its own clients (the test harness enforces each
	// function's IAM grant on its clients).
	ClientsFor func(fn resources.Function) (cloud.Clients, error)
	Config     Config
	// Settings are the deployment's settings the functions read (see Config); nil reads nothing.
	Settings Settings
	// Secrets reads the secrets settings name by ARN; nil reads none.
	Secrets SecretReader
	Log     *slog.Logger
	Metrics metrics.Recorder
	Now     func() time.Time
}

// Build composes the named function.
func (d Definitions) Build(name string, env Env) (*Function, error) {
	entry, ok := d.Function(name)
	if !ok {
		return nil, fmt.Errorf("build %s: no such function in resources.Functions", name)
	}
	b, ok := d.Builder(name)
	if !ok {
		return nil, fmt.Errorf("build %s: no builder", name)
	}
	grant, err := env.Names.Grant(entry)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", name, err)
	}
	clients := env.Clients
	if env.ClientsFor != nil {
		if clients, err = env.ClientsFor(entry); err != nil {
			return nil, fmt.Errorf("build %s: clients: %w", name, err)
		}
	}
	return d.build(b, entry, grant, env.Config, env.Settings, env.Secrets, clients, env.Log, env.Metrics, env.Now)
}

// BuildAll composes every function, in definition order.
func (d Definitions) BuildAll(env Env) ([]*Function, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	var fns []*Function
	for _, f := range d.Functions {
		fn, err := d.Build(f.Name, env)
		if err != nil {
			return nil, err
		}
		fns = append(fns, fn)
	}
	return fns, nil
}

// build runs one builder on what the function is given, and checks that what it built is what
// the entry says the function is.
func (d Definitions) build(b Builder, entry resources.Function, grant resources.Grant, cfg Config, settings Settings, secrets SecretReader, clients cloud.Clients, log *slog.Logger, rec metrics.Recorder, now func() time.Time) (*Function, error) {
	// A function reads only the settings it uses.
	if !resources.NeedsOperatorKey(d.Routes, entry.Name) {
		cfg.OperatorKey = ""
	}
	if settings == nil {
		settings = Settings{}
	}
	c := &Composer{
		Entry: entry, Config: cfg, Clients: clients, Log: log, Metrics: rec, Now: now,
		routes: d.Routes, grant: grant, settings: settings, secrets: secrets,
	}
	fn, err := b.Build(c)
	if err == nil {
		err = c.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", entry.Name, err)
	}
	kinds := d.Kinds(entry)
	if len(kinds) != 1 || fn.Kind() != kinds[0] {
		return nil, fmt.Errorf("build %s: its entry makes it %v, and its builder made a function with %v", entry.Name, kinds, kindPhrase(fn.Kind()))
	}
	if fn.HTTP != nil {
		if _, err := fn.HTTP.Handler(); err != nil {
			return nil, fmt.Errorf("build %s: %w", entry.Name, err)
		}
	}
	return fn, nil
}

// Composer is what a builder composes a function from: its entry, the resources the entry
// grants, its configuration and settings, clients, logger, metrics and clock. Asking it for a
// resource the entry does not grant, or at more access than it grants, records an error that
// Build returns: the builder can go on wiring, and every problem is reported at once.
type Composer struct {
	Entry   resources.Function
	Config  Config
	Clients cloud.Clients
	Log     *slog.Logger
	Metrics metrics.Recorder
	Now     func() time.Time

	routes   []resources.Route
	grant    resources.Grant
	settings Settings
	secrets  SecretReader
	errs     []error
}

// Table is the physical name of a table the entry grants at access need.
func (c *Composer) Table(logical string, need resources.Access) string {
	name, err := c.grant.Table(logical, need)
	c.Fail(err)
	return name
}

// QueueURL is the URL of a queue the entry grants at access need.
func (c *Composer) QueueURL(logical string, need resources.Access) string {
	url, err := c.grant.QueueURL(logical, need)
	c.Fail(err)
	return url
}

// Bucket is the physical name of a bucket the entry grants at access need.
func (c *Composer) Bucket(logical string, need resources.Access) string {
	name, err := c.grant.Bucket(logical, need)
	c.Fail(err)
	return name
}

// DynamoDB is the function's DynamoDB client.
func (c *Composer) DynamoDB() *dynamodb.Client { return c.Clients.DynamoDB }

// Routes are the route table the function is built against.
func (c *Composer) Routes() []resources.Route { return c.routes }

// Settings are the deployment's settings the function reads.
func (c *Composer) Settings() Settings { return c.settings }

// Err reports every resource the builder asked for that the entry does not grant, and every
// other failure a builder recorded with Fail.
func (c *Composer) Err() error { return errors.Join(c.errs...) }

// Fail records a build error; Build returns it with every other.
func (c *Composer) Fail(err error) {
	if err != nil {
		c.errs = append(c.errs, err)
	}
}

// Function starts the function value a builder returns, with the composer's logger, metrics and
// clock, holding the builder's parts.
func (c *Composer) Function(parts any) *Function {
	return &Function{Entry: c.Entry, Parts: parts, Log: c.Log, Metrics: c.Metrics, Now: c.Now}
}

package rehearsal

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// List prices in us-east-1, in US dollars, as AWS publishes them on each service's pricing page.
// They are the only figures here not read from the template.
const (
	secretPerMonth          = 0.40
	alarmPerMonth           = 0.10 // a standard-resolution (60 s period) alarm on one metric
	alarmsFreeTier          = 10   // alarms free per account each month
	kmsKeyPerMonth          = 1.00
	kmsRotationPerMonth     = 1.00 // each of a key's first two rotations adds this, for good
	kmsBilledRotations      = 2
	schedulerPerMillion     = 1.00
	schedulerFreePerMonth   = 14_000_000
	lambdaRequestPerMillion = 0.20
	lambdaArmPerGBSecond    = 0.0000133334
	logsIngestPerGB         = 0.50
	logsStoragePerGBMonth   = 0.03
	sqsPerMillion           = 0.40
	sqsFreePerMonth         = 1_000_000
)

// What an idle stack does that the template does not say, each a named assumption the sheet
// prints beside its result.
const (
	// idleRunMs is how long a scheduled run lasts with nothing to do: a few empty queries.
	idleRunMs = 200
	// idleRunLogBytes is what one idle run logs: Lambda's START, END and REPORT lines and
	// Ferry's one summary line.
	idleRunLogBytes = 700
	// sqsPollersPerSource and sqsLongPollSeconds are how Lambda polls an idle queue for an
	// event source: five pollers, each a 20-second long poll (Lambda's SQS documentation).
	sqsPollersPerSource = 5
	sqsLongPollSeconds  = 20
	// minutesPerMonth is an average month: 365.25 days / 12.
	minutesPerMonth = 43_830
)

// CostLine is one item billed with no traffic.
type CostLine struct {
	Item     string
	Count    string
	PerMonth float64
	How      string
}

// CostSheet is the stack's cost at rest, per month.
type CostSheet struct {
	Lines []CostLine
	// Total is the sum of the lines; TotalAfterFreeTier counts the free tiers the lines name.
	Total, TotalAfterFreeTier float64
	// KMSRotationsLater is what the keys' rotations add from the first and second years on.
	KMSRotationsLater float64
}

// secretARN is a Secrets Manager secret's ARN written into the template as text (a secret the
// stack refers to but does not create), with the suffix a grant on a partial ARN adds.
var secretARN = regexp.MustCompile(`^(arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+?)(-[A-Za-z0-9]{6}|-\?{6}|\*)?$`)

// importedSecrets lists the secrets the template names by ARN, each once.
func importedSecrets(t Template) map[string]bool {
	out := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if m := secretARN.FindStringSubmatch(v); m != nil {
				out[m[1]] = true
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, r := range t.Resources {
		walk(r.Properties)
	}
	return out
}

var ratePattern = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// runsPerMonth reads a rate() schedule expression.
func runsPerMonth(expr string) (float64, error) {
	m := ratePattern.FindStringSubmatch(expr)
	if m == nil {
		return 0, fmt.Errorf("schedule %q: only rate() expressions are costed", expr)
	}
	n, _ := strconv.Atoi(m[1])
	minutes := map[string]int{"minute": 1, "minutes": 1, "hour": 60, "hours": 60, "day": 1440, "days": 1440}[m[2]] * n
	return float64(minutesPerMonth) / float64(minutes), nil
}

// CostAtRest computes what the template costs a month with no traffic: the items AWS bills for
// existing (secrets, alarms, keys) and the work the stack does on its own (schedules and the
// functions they run, their logs, the event sources' polls of idle queues). Storage that is
// empty costs nothing and is left out.
func CostAtRest(t Template) (CostSheet, error) {
	var s CostSheet
	count := func(typ string) []Resource {
		var out []Resource
		for _, id := range sortedKeys(t.Resources) {
			if t.Resources[id].Type == typ {
				out = append(out, t.Resources[id])
			}
		}
		return out
	}
	add := func(l CostLine) { s.Lines = append(s.Lines, l); s.Total += l.PerMonth }

	if n := len(count("AWS::SecretsManager::Secret")); n > 0 {
		add(CostLine{"Secrets Manager secrets the stack creates", strconv.Itoa(n), float64(n) * secretPerMonth, fmt.Sprintf("%d × $%.2f", n, secretPerMonth)})
	}
	if n := len(importedSecrets(t)); n > 0 {
		add(CostLine{"Secrets Manager secrets the operator hands the stack by ARN", strconv.Itoa(n), float64(n) * secretPerMonth,
			fmt.Sprintf("%d × $%.2f, billed to the same account though the stack does not own them", n, secretPerMonth)})
	}
	alarms := count("AWS::CloudWatch::Alarm")
	for _, a := range alarms {
		if p, ok := a.Properties["Period"].(float64); ok && p < 60 {
			return s, fmt.Errorf("alarm %v: a high-resolution alarm is priced differently", a.Properties["AlarmName"])
		}
	}
	if n := len(alarms); n > 0 {
		add(CostLine{"CloudWatch alarms (standard resolution)", strconv.Itoa(n), float64(n) * alarmPerMonth,
			fmt.Sprintf("%d × $%.2f (the first %d in an account are free)", n, alarmPerMonth, alarmsFreeTier)})
	}
	if n := len(count("AWS::KMS::Key")); n > 0 {
		add(CostLine{"KMS customer managed keys (the alarm topic's)", strconv.Itoa(n), float64(n) * kmsKeyPerMonth,
			fmt.Sprintf("%d × $%.2f; each yearly rotation adds $%.2f, for the first %d", n, kmsKeyPerMonth, kmsRotationPerMonth, kmsBilledRotations)})
		s.KMSRotationsLater = float64(n) * kmsRotationPerMonth
	}

	// The schedules, and the functions they run.
	memory := map[string]float64{}
	for id, r := range t.Resources {
		if r.Type == "AWS::Lambda::Function" {
			mb, _ := r.Properties["MemorySize"].(float64)
			memory[id] = mb
		}
	}
	var runs, gbSeconds float64
	var lines []string
	for _, sched := range count("AWS::Scheduler::Schedule") {
		expr, _ := sched.Properties["ScheduleExpression"].(string)
		n, err := runsPerMonth(expr)
		if err != nil {
			return s, err
		}
		target, _ := sched.Properties["Target"].(map[string]any)
		mb := 0.0
		for _, id := range refs(target["Arn"]) {
			mb = max(mb, memory[id])
		}
		runs += n
		gbSeconds += n * idleRunMs / 1000 * mb / 1024
		lines = append(lines, fmt.Sprintf("%s at %g MB", expr, mb))
	}
	if runs > 0 {
		sort.Strings(lines)
		scheduler := math.Max(0, runs-schedulerFreePerMonth) / 1e6 * schedulerPerMillion
		add(CostLine{"EventBridge Scheduler invocations", fmt.Sprintf("%.0f", runs), scheduler,
			fmt.Sprintf("%s; the first %d million a month are free", strings.Join(compactList(lines), ", "), schedulerFreePerMonth/1_000_000)})
		lambda := runs/1e6*lambdaRequestPerMillion + gbSeconds*lambdaArmPerGBSecond
		add(CostLine{"Lambda: the scheduled runs (arm64)", fmt.Sprintf("%.0f runs, %.0f GB-s", runs, gbSeconds), lambda,
			fmt.Sprintf("$%.2f per million requests + $%.7f per GB-s, at %d ms an idle run (inside Lambda's free tier of 1 million requests and 400,000 GB-s, if the account has no other use)", lambdaRequestPerMillion, lambdaArmPerGBSecond, idleRunMs)})
		logGB := runs * idleRunLogBytes / 1e9
		retention := 0.0
		for _, g := range count("AWS::Logs::LogGroup") {
			if d, ok := g.Properties["RetentionInDays"].(float64); ok {
				retention = max(retention, d)
			}
		}
		stored := logGB * math.Min(retention/30.44, 12)
		add(CostLine{"CloudWatch Logs: the scheduled runs' lines", fmt.Sprintf("%.3f GB a month, kept %g days", logGB, retention), logGB*logsIngestPerGB + stored*logsStoragePerGBMonth,
			fmt.Sprintf("%d bytes a run; $%.2f per GB ingested, $%.2f per GB-month stored", idleRunLogBytes, logsIngestPerGB, logsStoragePerGBMonth)})
	}
	if n := len(count("AWS::Lambda::EventSourceMapping")); n > 0 {
		polls := float64(n) * sqsPollersPerSource * (60 / sqsLongPollSeconds) * minutesPerMonth
		add(CostLine{"SQS: the event sources' polls of idle queues", fmt.Sprintf("%.0f requests", polls), math.Max(0, polls-sqsFreePerMonth) / 1e6 * sqsPerMillion,
			fmt.Sprintf("%d sources × %d pollers × a %d s long poll; the first million requests a month are free", n, sqsPollersPerSource, sqsLongPollSeconds)})
	}
	s.TotalAfterFreeTier = s.Total
	if n := len(alarms); n > 0 {
		s.TotalAfterFreeTier -= float64(min(n, alarmsFreeTier)) * alarmPerMonth
	}
	return s, nil
}

// compactList counts repeated entries: "rate(1 minute) at 256 MB ×4".
func compactList(items []string) []string {
	var out []string
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j] == items[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", items[i], j-i))
		} else {
			out = append(out, items[i])
		}
		i = j
	}
	return out
}

// Markdown renders the sheet as a table.
func (s CostSheet) Markdown() string {
	var b strings.Builder
	b.WriteString("| item | count | per month | how |\n|---|---:|---:|---|\n")
	for _, l := range s.Lines {
		fmt.Fprintf(&b, "| %s | %s | $%.2f | %s |\n", l.Item, l.Count, l.PerMonth, l.How)
	}
	fmt.Fprintf(&b, "| **total** | | **$%.2f** | $%.2f where these are the account's only alarms |\n", s.Total, s.TotalAfterFreeTier)
	return b.String()
}
